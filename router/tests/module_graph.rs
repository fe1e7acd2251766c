//! The crate's module graph, read from its sources: every `router/src/**/*.rs` file is a module, and a path to
//! another module (`use crate::x::...`, `crate::x::f(...)`, `super::x`, a child module's name) is an edge to the
//! deepest module file the path names. The graph must have no cycle (a module never uses one that uses it back,
//! directly or through others), a module uses only modules listed before it in [`LAYERS`], only a link protocol's own
//! family and the stream layer's dispatch ([`PROTOCOL_DISPATCH`]) use a protocol's modules ([`PROTOCOL_FAMILIES`]),
//! and no file holds more than [`LINE_BUDGET`] lines before its unit tests.
//!
//! Read, not compiled: comments and string and character literals are skipped; `pub(in path)` is not used in this
//! crate (it would count as an edge). `cargo test --test module_graph -- --nocapture` prints the modules in layers
//! (each uses only modules of lower layers) with their lines.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Lines a source file may hold before its `#[cfg(test)] mod ...` (the whole file when it has none).
const LINE_BUDGET: usize = 900;

/// Every module, lowest first: a module may use only the modules before it (the order of the module table in
/// `docs/architecture.md`, "The router crate"). `crate` is `lib.rs`, which only declares modules.
const LAYERS: &[&str] = &[
    "text",
    "clock",
    "vectored",
    "workers",
    "observe::exchange",
    "observe::http1",
    "observe::http2",
    "observe",
    "config",
    "stream::types",
    "native::frame",
    "linkstate",
    "report",
    "message",
    "native::mux",
    "native::hello",
    "native",
    "amqp::codec::value",
    "amqp::codec::decode",
    "amqp::codec::encode",
    "amqp::codec",
    "amqp::composite",
    "amqp::performative::terminus",
    "amqp::performative::sasl",
    "amqp::performative",
    "amqp::message",
    "amqp::frame",
    "amqp::sasl",
    "amqp::conn::types",
    "amqp::conn::unsettled",
    "amqp::conn",
    "amqp::interior",
    "amqp::driver",
    "amqp::live",
    "amqp::routing::messages",
    "amqp::routing::paths",
    "amqp::routing::engine",
    "amqp::routing::wire",
    "amqp::routing::onward",
    "amqp::routing",
    "amqp::node",
    "amqp::flow::head",
    "amqp::flow::pool",
    "amqp::flow::halves",
    "amqp::flow::mux",
    "amqp::flow",
    "amqp::vanflow::records",
    "amqp::vanflow::wire",
    "amqp::vanflow::source",
    "amqp::vanflow::site",
    "amqp::vanflow::biflow",
    "amqp::vanflow::task",
    "amqp::vanflow::shown",
    "amqp::vanflow::ours",
    "amqp::vanflow::collected",
    "amqp::vanflow::edges",
    "amqp::vanflow::transit",
    "amqp::vanflow::publish",
    "amqp::vanflow::collect",
    "amqp::vanflow",
    "amqp::edge",
    "amqp::edge_out",
    "amqp",
    "stream::halves",
    "stream::control",
    "stream::conn",
    "stream::border",
    "stream::protocol",
    "stream",
    "metrics",
    "tlsrec",
    "tlsio",
    "link",
    "tls",
    "splice",
    "pump",
    "router::net",
    "router::profiles",
    "router::aliases",
    "router::identities",
    "router::reports",
    "router::targets",
    "router::control",
    "router::upstream",
    "router::forward",
    "router::links",
    "router::access",
    "router::listeners",
    "router::status",
    "router::observation",
    "router",
    "api",
    "crate",
];

/// The link protocols' module families: each protocol's framing, multiplexing and handshake.
const PROTOCOL_FAMILIES: &[&str] = &["native", "amqp"];

/// The modules of the stream layer that dispatch to each protocol (one enum variant or match arm per protocol):
/// besides a protocol's own family, the only modules that may use it.
const PROTOCOL_DISPATCH: &[&str] = &["stream::halves", "stream::conn", "stream::border", "stream::protocol"];

fn read_crate() -> Crate {
    Crate::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

#[test]
fn the_module_graph_has_no_cycle() {
    let crate_ = read_crate();
    println!("{}", crate_.layers());
    let mut failures = vec![];
    for cycle in crate_.cycles() {
        let steps: Vec<String> = cycle
            .windows(2)
            .map(|w| {
                let (line, path) = &crate_.edges[&w[0]][&w[1]];
                format!("{}:{line} `{path}`", crate_.file_of(&w[0]))
            })
            .collect();
        let names: Vec<String> = cycle.iter().map(display).collect();
        failures.push(format!("module cycle: {} (through {})", names.join(" -> "), steps.join(", ")));
    }
    assert!(failures.is_empty(), "\n{}\n", failures.join("\n"));
}

#[test]
fn modules_use_only_modules_listed_before_them() {
    let crate_ = read_crate();
    let place = |m: &Module| LAYERS.iter().position(|l| *l == display(m));
    let mut failures = vec![];
    for (module, uses) in &crate_.edges {
        let Some(at) = place(module) else {
            failures.push(format!("{}: module {} is not in LAYERS", crate_.file_of(module), display(module)));
            continue;
        };
        for (used, (line, path)) in uses {
            if place(used).is_none_or(|p| p >= at) {
                failures.push(format!(
                    "{}:{line} `{path}`: {} uses {}, which is not listed before it in LAYERS",
                    crate_.file_of(module),
                    display(module),
                    display(used)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "\n{}\n", failures.join("\n"));
}

/// The routing code (`router::*`, `pump`, `link`: forwarding, listeners, links, the control plane) imports no
/// protocol's framing: it speaks the stream layer (`stream::*`), so a second link protocol plugs in beside
/// `native/` without changing it. Only a protocol's own family and the stream layer's dispatch use its modules.
#[test]
fn only_the_stream_layer_uses_a_link_protocol() {
    let crate_ = read_crate();
    let family_of = |m: &Module| m.first().filter(|f| PROTOCOL_FAMILIES.contains(&f.as_str())).cloned();
    let mut failures = vec![];
    for (module, uses) in &crate_.edges {
        for (used, (line, path)) in uses {
            let Some(family) = family_of(used) else { continue };
            if family_of(module).as_ref() == Some(&family) || PROTOCOL_DISPATCH.contains(&display(module).as_str()) {
                continue;
            }
            failures.push(format!(
                "{}:{line} `{path}`: {} uses the {family} link protocol's {}; the routing code speaks only the \
                 stream layer (stream::*)",
                crate_.file_of(module),
                display(module),
                display(used)
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}\n", failures.join("\n"));
}

/// Upstream's AMQP family (`amqp::*`: its codec, frames, performatives, message sections) is used only by itself and
/// the stream layer (`stream::*`), which makes it one more link protocol: the routing code never sees AMQP types.
#[test]
fn only_the_stream_layer_uses_amqp() {
    let crate_ = read_crate();
    let failures: Vec<String> = amqp_uses_outside(&crate_.edges)
        .into_iter()
        .map(|(module, used, line, path)| {
            format!(
                "{}:{line} `{path}`: {module} uses {used}; only amqp::* and stream::* may use the AMQP family",
                crate_.file_of(&module.split("::").map(String::from).collect())
            )
        })
        .collect();
    assert!(failures.is_empty(), "\n{}\n", failures.join("\n"));
}

/// Every use of an `amqp::*` module by a module outside `amqp` and `stream`: (module, used, line, path).
fn amqp_uses_outside(
    edges: &BTreeMap<Module, BTreeMap<Module, (usize, String)>>,
) -> Vec<(String, String, usize, String)> {
    fn family(m: &Module) -> Option<&str> {
        m.first().map(String::as_str)
    }
    let mut out = vec![];
    for (module, uses) in edges {
        if matches!(family(module), Some("amqp" | "stream")) {
            continue;
        }
        for (used, (line, path)) in uses {
            if family(used) == Some("amqp") {
                out.push((display(module), display(used), *line, path.clone()));
            }
        }
    }
    out
}

#[test]
fn the_amqp_rule_catches_a_routing_module_that_uses_amqp() {
    let m = |s: &str| -> Module { s.split("::").map(String::from).collect() };
    let mut edges: BTreeMap<Module, BTreeMap<Module, (usize, String)>> = BTreeMap::new();
    let uses = |line: usize, path: &str| (line, path.to_string());
    edges.entry(m("router::forward")).or_default().insert(m("amqp::frame"), uses(3, "crate::amqp::frame::Frame"));
    edges.entry(m("stream::conn")).or_default().insert(m("amqp::frame"), uses(4, "crate::amqp::frame"));
    edges.entry(m("amqp::frame")).or_default().insert(m("amqp::codec"), uses(5, "super::codec"));
    edges.entry(m("pump")).or_default().insert(m("stream::halves"), uses(6, "crate::stream::halves"));
    let found = amqp_uses_outside(&edges);
    assert_eq!(found, vec![("router::forward".into(), "amqp::frame".into(), 3, "crate::amqp::frame::Frame".into())]);
}

#[test]
fn no_file_is_over_the_line_budget() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![];
    collect(&src, &mut files);
    let mut failures = vec![];
    for file in files {
        let lines = lines_before_tests(&std::fs::read_to_string(&file).unwrap());
        if lines > LINE_BUDGET {
            let name = file.strip_prefix(&src).unwrap().display();
            failures.push(format!("{name}: {lines} lines before its unit tests (budget {LINE_BUDGET})"));
        }
    }
    assert!(failures.is_empty(), "\n{}\n", failures.join("\n"));
}

#[test]
fn the_reader_sees_paths_and_skips_comments_and_literals() {
    let text = r##"
        //! See `crate::doc_only`.
        use crate::a::{self, b::{C, D as E}, f::*};
        use super::sibling;
        mod child;
        /* crate::in_block_comment /* nested */ */
        fn f() { let _ = "crate::in_string"; let _ = r#"crate::raw"#; let _ = '"'; let _ = '\''; let _ = br#"crate::b"#; child::g(); crate::h::i(); }
        pub(crate) fn g<'a>(x: &'a str) -> &'a str { x }
        #[cfg(test)]
        mod tests {
            use super::*;
        }
    "##;
    let refs = references(text);
    let paths: BTreeSet<String> = refs.iter().map(|r| r.path.join("::")).collect();
    let want: BTreeSet<String> =
        ["crate::a", "crate::a::b::C", "crate::a::b::D", "crate::a::f", "super::sibling", "child::g", "crate::h::i"]
            .iter()
            .map(|s| s.to_string())
            .chain(std::iter::once("super".to_string()))
            .collect();
    assert_eq!(paths, want);
    let in_tests = refs.iter().find(|r| r.path == ["super"]).unwrap();
    assert_eq!(in_tests.scope, ["tests"]);
    assert_eq!(lines_before_tests(text), 8);
}

/// A module's path from the crate root (`[]` is `lib.rs`).
type Module = Vec<String>;

fn display(m: &Module) -> String {
    if m.is_empty() {
        "crate".into()
    } else {
        m.join("::")
    }
}

struct Crate {
    src: PathBuf,
    files: BTreeMap<Module, PathBuf>,
    lines: BTreeMap<Module, usize>,
    /// module -> module it uses -> (the first line that does, the path written there)
    edges: BTreeMap<Module, BTreeMap<Module, (usize, String)>>,
}

impl Crate {
    fn read(src: &Path) -> Crate {
        let mut files = BTreeMap::new();
        let mut paths = vec![];
        collect(src, &mut paths);
        for path in paths {
            let rel = path.strip_prefix(src).unwrap();
            let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
            let last = parts.pop().unwrap();
            match last.as_str() {
                // the binary is a crate of its own, using this one by name (`snrouter::...`)
                "main.rs" if parts.is_empty() => continue,
                "lib.rs" if parts.is_empty() => {}
                "mod.rs" => {}
                other => parts.push(other.trim_end_matches(".rs").to_string()),
            }
            files.insert(parts, path);
        }
        let mut crate_ = Crate { src: src.to_path_buf(), files, lines: BTreeMap::new(), edges: BTreeMap::new() };
        let modules: Vec<Module> = crate_.files.keys().cloned().collect();
        for module in modules {
            let text = std::fs::read_to_string(&crate_.files[&module]).unwrap();
            crate_.lines.insert(module.clone(), lines_before_tests(&text));
            let children = declared_children(&text);
            for r in references(&text) {
                let scope: Module = module.iter().chain(&r.scope).cloned().collect();
                let Some(target) = crate_.resolve(&module, &scope, &children, &r.path) else { continue };
                if target != module {
                    crate_
                        .edges
                        .entry(module.clone())
                        .or_default()
                        .entry(target)
                        .or_insert((r.line, r.path.join("::")));
                }
            }
            crate_.edges.entry(module).or_default();
        }
        crate_
    }

    fn file_of(&self, m: &Module) -> String {
        self.files[m].strip_prefix(&self.src).unwrap().display().to_string()
    }

    /// The module file a path leads to: the longest prefix of its absolute form that is a module of the crate.
    /// `scope` is the file's module and the inline modules around the path; `children` what the file declares.
    fn resolve(
        &self,
        module: &Module,
        scope: &[String],
        children: &BTreeSet<String>,
        path: &[String],
    ) -> Option<Module> {
        let (mut abs, rest): (Vec<String>, &[String]) = match path[0].as_str() {
            "crate" => (vec![], &path[1..]),
            "self" => (scope.to_vec(), &path[1..]),
            "super" => (scope.to_vec(), path),
            first if children.contains(first) => (module.clone(), path),
            _ => return None,
        };
        for seg in rest {
            match seg.as_str() {
                "super" => {
                    abs.pop()?;
                }
                "self" => {}
                s => abs.push(s.to_string()),
            }
        }
        (0..=abs.len()).rev().map(|n| abs[..n].to_vec()).find(|m| self.files.contains_key(m))
    }

    /// Every cycle's strongly connected component, as one cycle through it (first module repeated at the end).
    fn cycles(&self) -> Vec<Vec<Module>> {
        let mut out = vec![];
        for component in self.components() {
            if component.len() < 2 {
                continue;
            }
            // a shortest way back to the component's first module, by breadth-first search inside it
            let start = component.iter().next().unwrap().clone();
            let mut back: BTreeMap<Module, Module> = BTreeMap::new();
            let mut queue = std::collections::VecDeque::from([start.clone()]);
            'search: while let Some(m) = queue.pop_front() {
                for next in self.edges[&m].keys().filter(|n| component.contains(*n)) {
                    if *next == start {
                        back.insert(start.clone(), m.clone());
                        break 'search;
                    }
                    if !back.contains_key(next) {
                        back.insert(next.clone(), m.clone());
                        queue.push_back(next.clone());
                    }
                }
            }
            let mut cycle = vec![start.clone()];
            let mut at = back[&start].clone();
            while at != start {
                cycle.push(at.clone());
                at = back[&at].clone();
            }
            cycle.push(start);
            cycle.reverse();
            out.push(cycle);
        }
        out
    }

    /// Strongly connected components (Tarjan).
    fn components(&self) -> Vec<BTreeSet<Module>> {
        struct Walk<'a> {
            edges: &'a BTreeMap<Module, BTreeMap<Module, (usize, String)>>,
            index: BTreeMap<Module, usize>,
            low: BTreeMap<Module, usize>,
            stack: Vec<Module>,
            on_stack: BTreeSet<Module>,
            out: Vec<BTreeSet<Module>>,
        }
        fn visit(w: &mut Walk<'_>, m: &Module) {
            let i = w.index.len();
            w.index.insert(m.clone(), i);
            w.low.insert(m.clone(), i);
            w.stack.push(m.clone());
            w.on_stack.insert(m.clone());
            let edges = w.edges;
            for next in edges[m].keys() {
                if !w.index.contains_key(next) {
                    visit(w, next);
                    let l = w.low[m].min(w.low[next]);
                    w.low.insert(m.clone(), l);
                } else if w.on_stack.contains(next) {
                    let l = w.low[m].min(w.index[next]);
                    w.low.insert(m.clone(), l);
                }
            }
            if w.low[m] == w.index[m] {
                let mut component = BTreeSet::new();
                while let Some(top) = w.stack.pop() {
                    w.on_stack.remove(&top);
                    let done = top == *m;
                    component.insert(top);
                    if done {
                        break;
                    }
                }
                w.out.push(component);
            }
        }
        let mut w = Walk {
            edges: &self.edges,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: vec![],
            on_stack: BTreeSet::new(),
            out: vec![],
        };
        for m in self.edges.keys() {
            if !w.index.contains_key(m) {
                visit(&mut w, m);
            }
        }
        w.out
    }

    /// The modules in layers: each uses only modules of the layers before it (modules of a cycle share a layer).
    fn layers(&self) -> String {
        let mut layer_of: BTreeMap<Module, usize> = BTreeMap::new();
        // components come out of Tarjan's walk in reverse topological order: what a component uses comes first
        for component in self.components() {
            let layer = component
                .iter()
                .flat_map(|m| self.edges[m].keys())
                .filter(|n| !component.contains(*n))
                .map(|n| layer_of[n] + 1)
                .max()
                .unwrap_or(0);
            for m in component {
                layer_of.insert(m, layer);
            }
        }
        let mut by_layer: BTreeMap<usize, Vec<&Module>> = BTreeMap::new();
        for (m, l) in &layer_of {
            by_layer.entry(*l).or_default().push(m);
        }
        let mut out = String::from("module layers (a module uses only modules of lower layers):\n");
        for (l, modules) in by_layer {
            for m in modules {
                let uses: Vec<String> = self.edges[m].keys().map(display).collect();
                out.push_str(&format!(
                    "  {l:>2}  {:<28} {:>5} lines  uses: {}\n",
                    self.file_of(m),
                    self.lines[m],
                    if uses.is_empty() { "-".to_string() } else { uses.join(", ") }
                ));
            }
        }
        out
    }
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            collect(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// Lines before the unit tests: before the first `#[cfg(test)]` that a `mod` follows.
fn lines_before_tests(text: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.trim() == "#[cfg(test)]" {
            let next = lines[i + 1..].iter().map(|l| l.trim()).find(|l| !l.is_empty()).unwrap_or("");
            if next.starts_with("mod ") || next.starts_with("pub mod ") {
                return i;
            }
        }
    }
    lines.len()
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    PathSep,
    Punct(char),
}

/// The tokens of a source text that matter for paths, with their lines; comments and literals are left out.
fn tokens(text: &str) -> Vec<(Token, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = vec![];
    let (mut i, mut line) = (0, 1);
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            loop {
                if i >= chars.len() {
                    break;
                }
                if chars[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if chars[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if let Some(r) = [i, i + 1].into_iter().find(|&r| {
            at(r) == 'r'
                && (r == i || c == 'b')
                && (at(r + 1) == '"' || at(r + 1) == '#' && matches!(at(r + 2), '"' | '#'))
        }) {
            // a raw string: r"...", r#"..."#, br"...", ...
            let mut j = r + 1;
            let mut hashes = 0;
            while at(j) == '#' {
                hashes += 1;
                j += 1;
            }
            j += 1; // the opening quote
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"' && (1..=hashes).all(|k| at(j + k) == '#') {
                    j += 1 + hashes;
                    break;
                }
                if chars[j] == '\n' {
                    line += 1;
                }
                j += 1;
            }
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                if at(i) == '\n' {
                    line += 1;
                }
                i += 1;
            }
            i += 1;
        } else if c == '\'' {
            // a character literal ('x', '\n', '\u{..}'), else a lifetime or label ('a)
            if at(i + 1) == '\\' {
                i += 3;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1;
            }
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push((Token::Ident(chars[start..i].iter().collect()), line));
        } else if c == ':' && at(i + 1) == ':' {
            out.push((Token::PathSep, line));
            i += 2;
        } else {
            out.push((Token::Punct(c), line));
            i += 1;
        }
    }
    out
}

/// A path written in a source file: where (the inline modules around it, the line) and its segments.
#[derive(Debug)]
struct Reference {
    scope: Vec<String>,
    line: usize,
    path: Vec<String>,
}

/// Every path that may name a module: the paths a `use` imports (a tree expanded; `self` dropped; a glob names its
/// module) and every other path of two or more segments.
fn references(text: &str) -> Vec<Reference> {
    let toks = tokens(text);
    let mut out = vec![];
    // inline modules (`mod tests { ... }`) open at a brace depth
    let mut scope: Vec<(String, usize)> = vec![];
    let mut depth = 0usize;
    let mut i = 0;
    let ident = |i: usize| match toks.get(i) {
        Some((Token::Ident(s), _)) => Some(s.as_str()),
        _ => None,
    };
    while i < toks.len() {
        let names: Vec<String> = scope.iter().map(|(n, _)| n.clone()).collect();
        match &toks[i].0 {
            Token::Punct('{') => {
                depth += 1;
                i += 1;
            }
            Token::Punct('}') => {
                if scope.last().is_some_and(|(_, d)| *d == depth) {
                    scope.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
            }
            Token::Ident(w) if w == "mod" && toks.get(i + 2).is_some_and(|t| t.0 == Token::Punct('{')) => {
                scope.push((ident(i + 1).unwrap_or("").to_string(), depth + 1));
                i += 2;
            }
            Token::Ident(w) if w == "use" && !matches!(toks.get(i.wrapping_sub(1)), Some((Token::PathSep, _))) => {
                let line = toks[i].1;
                let mut paths = vec![];
                i = use_tree(&toks, i + 1, vec![], &mut paths);
                for path in paths {
                    let path: Vec<String> =
                        path.into_iter().enumerate().filter(|(k, s)| *k == 0 || s != "self").map(|(_, s)| s).collect();
                    out.push(Reference { scope: names.clone(), line, path });
                }
            }
            Token::Ident(_) if !matches!(toks.get(i.wrapping_sub(1)), Some((Token::PathSep, _))) => {
                let line = toks[i].1;
                let mut path = vec![ident(i).unwrap().to_string()];
                let mut j = i + 1;
                while matches!(toks.get(j), Some((Token::PathSep, _))) {
                    match ident(j + 1) {
                        Some(s) => path.push(s.to_string()),
                        None => break,
                    }
                    j += 2;
                }
                if path.len() > 1 {
                    out.push(Reference { scope: names.clone(), line, path });
                }
                i = j.max(i + 1);
            }
            _ => i += 1,
        }
    }
    out
}

/// Reads a use tree from `i` (after `use` or a `::{`), adding each full path to `out`; returns where it ended.
fn use_tree(toks: &[(Token, usize)], mut i: usize, mut prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    loop {
        match toks.get(i).map(|t| &t.0) {
            Some(Token::PathSep) => i += 1,
            Some(Token::Ident(s)) if s == "as" => {
                out.push(prefix.clone());
                return skip_to_end(toks, i + 2);
            }
            Some(Token::Ident(s)) => {
                prefix.push(s.clone());
                i += 1;
            }
            Some(Token::Punct('*')) => {
                out.push(prefix.clone());
                return skip_to_end(toks, i + 1);
            }
            Some(Token::Punct('{')) => {
                i += 1;
                loop {
                    match toks.get(i).map(|t| &t.0) {
                        Some(Token::Punct('}')) => return skip_to_end(toks, i + 1),
                        Some(Token::Punct(',')) => i += 1,
                        None => return i,
                        _ => i = use_tree(toks, i, prefix.clone(), out),
                    }
                }
            }
            _ => {
                if !prefix.is_empty() {
                    out.push(prefix.clone());
                }
                return skip_to_end(toks, i);
            }
        }
    }
}

/// Past a use tree's `;` at its end, but not past a `,` or `}` of the tree around it.
fn skip_to_end(toks: &[(Token, usize)], i: usize) -> usize {
    match toks.get(i).map(|t| &t.0) {
        Some(Token::Punct(';')) => i + 1,
        _ => i,
    }
}

/// The child modules a file declares (`mod x;`), which its paths may start with.
fn declared_children(text: &str) -> BTreeSet<String> {
    let toks = tokens(text);
    toks.windows(3)
        .filter_map(|w| match (&w[0].0, &w[1].0, &w[2].0) {
            (Token::Ident(m), Token::Ident(name), Token::Punct(';')) if m == "mod" => Some(name.clone()),
            _ => None,
        })
        .collect()
}
