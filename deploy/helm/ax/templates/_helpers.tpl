{{/* The release's name prefix (fullnameOverride, else <release>-ax, or the
release alone when it holds "ax"). */}}
{{- define "ax.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else if contains "ax" .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-ax" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "ax.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: ax
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "orchestrator") */}}
{{- define "ax.selector" -}}
app.kubernetes.io/name: ax
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The ax image. */}}
{{- define "ax.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* Environment that connects a process to NATS as a user:
(dict "root" $ "user" "orchestrator"). AX reads the nats CLI's variables
(deploy/README.md, "Connecting to a secured NATS"). */}}
{{- define "ax.natsEnv" -}}
{{- $n := .root.Values.nats -}}
- name: AX_NATS_URL
  value: {{ $n.url | quote }}
- name: NATS_URL
  value: {{ $n.url | quote }}
{{- if eq $n.auth.mode "password" }}
- name: NATS_USER
  value: {{ .user | quote }}
- name: NATS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $n.auth.existingSecret }}
      key: {{ .user }}
{{- else if eq $n.auth.mode "creds" }}
- name: NATS_CREDS
  value: /etc/ax/nats-creds/{{ .user }}.creds
{{- end }}
{{- if or (eq $n.auth.mode "password") $n.auth.inboxPrefix }}
- name: NATS_INBOX_PREFIX
  value: _INBOX.{{ .user }}
{{- end }}
{{- if $n.tls.enabled }}
- name: NATS_CA
  value: /etc/ax/nats-tls/ca.crt
{{- if $n.tls.clientCert }}
- name: NATS_CERT
  value: /etc/ax/nats-tls/tls.crt
- name: NATS_KEY
  value: /etc/ax/nats-tls/tls.key
{{- end }}
{{- end }}
{{- end -}}

{{/* Volume mounts of the NATS credentials and TLS files: (dict "root" $). */}}
{{- define "ax.natsMounts" -}}
{{- $n := .root.Values.nats -}}
- name: tmp
  mountPath: /tmp
{{- if eq $n.auth.mode "creds" }}
- name: nats-creds
  mountPath: /etc/ax/nats-creds
  readOnly: true
{{- end }}
{{- if $n.tls.enabled }}
- name: nats-tls
  mountPath: /etc/ax/nats-tls
  readOnly: true
{{- end }}
{{- end -}}

{{/* Volumes of the NATS credentials and TLS files: (dict "root" $ "user" "orchestrator"). */}}
{{- define "ax.natsVolumes" -}}
{{- $n := .root.Values.nats -}}
- name: tmp
  emptyDir: {}
{{- if eq $n.auth.mode "creds" }}
- name: nats-creds
  secret:
    secretName: {{ $n.auth.existingSecret }}
    items:
      - key: {{ .user }}.creds
        path: {{ .user }}.creds
{{- end }}
{{- if $n.tls.enabled }}
- name: nats-tls
  secret:
    secretName: {{ $n.tls.existingSecret }}
{{- end }}
{{- end -}}

{{/* Liveness and readiness on a port named metrics (or another name). */}}
{{- define "ax.probes" -}}
livenessProbe:
  httpGet:
    path: /healthz
    port: {{ .port }}
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 6
readinessProbe:
  httpGet:
    path: /readyz
    port: {{ .port }}
  periodSeconds: 5
  timeoutSeconds: 5
  failureThreshold: 2
{{- end -}}

{{/* Scrape annotations and the job label the alert rules expect. */}}
{{- define "ax.podMetadata" -}}
labels:
  {{- include "ax.selector" (dict "root" .root "component" .component) | nindent 2 }}
  ax.run/metrics-job: {{ .job }}
annotations:
  prometheus.io/scrape: "true"
  prometheus.io/port: {{ .root.Values.metrics.port | quote }}
  prometheus.io/path: /metrics
{{- end -}}
