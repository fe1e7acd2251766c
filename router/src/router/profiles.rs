//! A document's TLS profiles as the jobs that use them see them: each profile's material loaded once per apply,
//! and the fingerprint that tells an entity it must restart (its settings, or a rewritten file of its profile).

use std::collections::HashMap;
use std::time::SystemTime;

use crate::config::Document;
use crate::tls;

pub struct Profiles<'a> {
    doc: &'a Document,
    materials: HashMap<String, Result<tls::Material, String>>,
}

impl<'a> Profiles<'a> {
    /// Loads every profile of `doc` (secret profiles must have been resolved to files by the adaptor).
    pub fn load(doc: &'a Document) -> Profiles<'a> {
        let mut materials = HashMap::new();
        for p in &doc.tls_profiles {
            let m = match (&p.files, &p.secret) {
                (Some(files), _) => tls::load(files),
                _ => Err("secret profiles must be resolved to files by the adaptor".into()),
            };
            materials.insert(p.name.clone(), m);
        }
        Profiles { doc, materials }
    }

    /// A profile's material, or why it cannot be used (the message names the profile).
    pub fn material(&self, name: &str) -> Result<tls::Material, String> {
        match self.materials.get(name) {
            Some(Ok(m)) => Ok(m.clone()),
            Some(Err(e)) => Err(format!("TLS profile '{}' {}", crate::text::truncate(name, 100), e)),
            None => Err(format!("TLS profile '{}' does not exist", crate::text::truncate(name, 100))),
        }
    }

    /// What an entity runs as: its settings and its profile's files' modification stamps, so that a rewritten
    /// file re-applies what uses it.
    pub fn fingerprint(&self, entity: &impl std::fmt::Debug, profile: Option<&str>) -> String {
        format!("{:?}|{:?}", entity, self.stamp(profile))
    }

    fn stamp(&self, name: Option<&str>) -> Vec<Option<SystemTime>> {
        let Some(p) = name.and_then(|n| self.doc.profile(n)) else {
            return vec![];
        };
        let Some(f) = &p.files else { return vec![] };
        [&f.ca, &f.cert, &f.key]
            .iter()
            .map(|path| path.as_ref().and_then(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok()))
            .collect()
    }
}
