{{/* Names, labels and images shared by the templates. */}}

{{/* The chart name (nameOverride wins). */}}
{{- define "listener-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Prefix of every object name: the release name, with the chart name appended unless it already contains it. */}}
{{- define "listener-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels that select the Pods: name, instance and the user's extra labels (as upstream, so selectors match). */}}
{{- define "listener-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "listener-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- with .Values.labels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "listener-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "listener-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The ServiceAccount both workloads run as; with create=false a name is required. */}}
{{- define "listener-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (printf "%s-serviceaccount" (include "listener-operator.fullname" .)) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name must name an existing ServiceAccount when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The operator image reference. */}}
{{- define "listener-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/*
kubeletDir, checked: an absolute path without "..", spaces or a trailing slash, short enough that kubelet's two
Unix sockets below it fit the 107-byte limit of a socket path (the node-driver-registrar's
<kubeletDir>/plugins_registry/listeners.stackable.tech-reg.sock is the longer one).
*/}}
{{- define "listener-operator.kubeletDir" -}}
{{- $dir := .Values.kubeletDir | toString }}
{{- if not (regexMatch "^(/[A-Za-z0-9._-]+)+$" $dir) }}
{{- fail (printf "kubeletDir must be an absolute path of letters, digits, '.', '_', '-' without a trailing slash, got %q" ($dir | trunc 200)) }}
{{- end }}
{{- if regexMatch "(^|/)\\.\\.?(/|$)" $dir }}
{{- fail (printf "kubeletDir must not contain '.' or '..' components, got %q" ($dir | trunc 200)) }}
{{- end }}
{{- $socket := printf "%s/plugins_registry/listeners.stackable.tech-reg.sock" $dir }}
{{- if gt (len $socket) 107 }}
{{- fail (printf "kubeletDir is too long: %s has %d bytes, a Unix socket path may have at most 107" $socket (len $socket)) }}
{{- end }}
{{- $dir }}
{{- end }}

{{/* Logging environment of both operator containers (telemetry.consoleLog). */}}
{{- define "listener-operator.logEnv" -}}
{{- with .Values.telemetry.consoleLog.level }}
- name: CONSOLE_LOG_LEVEL
  value: {{ . | quote }}
{{- end }}
{{- with .Values.telemetry.consoleLog.format }}
- name: CONSOLE_LOG_FORMAT
  value: {{ . | quote }}
{{- end }}
{{- end }}

{{/* The ServiceAccount of the service network's site controller; with create=false a name is required. */}}
{{- define "listener-operator.serviceNetworkServiceAccountName" -}}
{{- if .Values.serviceNetwork.serviceAccount.create }}
{{- default (printf "%s-service-network-controller" (include "listener-operator.fullname" .)) .Values.serviceNetwork.serviceAccount.name }}
{{- else }}
{{- required "serviceNetwork.serviceAccount.name must name an existing ServiceAccount when serviceNetwork.serviceAccount.create is false" .Values.serviceNetwork.serviceAccount.name }}
{{- end }}
{{- end }}
