{{/* The image of every container. */}}
{{- define "ic.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end }}

{{/* The server's labels (selector and pods). */}}
{{- define "ic.serverLabels" -}}
app.kubernetes.io/name: inference-cache
app.kubernetes.io/component: server
{{- end }}

{{/* Refuse values no cluster could run with. */}}
{{- define "ic.validate" -}}
{{- $n := int .Values.server.replicas -}}
{{- if not (or (eq $n 3) (eq $n 5)) -}}
{{- fail (printf "server.replicas %d: want 3 or 5 (Raft voters)" $n) -}}
{{- end -}}
{{- if not (has .Values.server.antiAffinity (list "required" "preferred")) -}}
{{- fail (printf "server.antiAffinity %q: want required or preferred" .Values.server.antiAffinity) -}}
{{- end -}}
{{- if not (has .Values.tls.clientAuth (list "none" "request" "require-and-verify")) -}}
{{- fail (printf "tls.clientAuth %q: want none, request or require-and-verify" .Values.tls.clientAuth) -}}
{{- end -}}
{{- if not (has .Values.picker.failureMode (list "FailOpen" "FailClose")) -}}
{{- fail (printf "picker.failureMode %q: want FailOpen or FailClose" .Values.picker.failureMode) -}}
{{- end -}}
{{- end }}

{{/* The flags a client (picker, subscriber, proxy) dials the servers with. */}}
{{- define "ic.clientFlags" -}}
{{- if .Values.tls.enabled }}
- --tls-ca=/etc/inference-cache-tls/ca.crt
- --tls-server-name={{ .Values.tls.serverName }}
{{- if eq .Values.tls.clientAuth "require-and-verify" }}
- --tls-cert=/etc/inference-cache-tls/tls.crt
- --tls-key=/etc/inference-cache-tls/tls.key
{{- end }}
{{- end }}
{{- if .Values.tokens.secretName }}
- --token-file=/etc/inference-cache-tokens/write.token
{{- end }}
{{- end }}

{{/* The volume mounts of the TLS and token Secrets. */}}
{{- define "ic.secretMounts" -}}
{{- if .Values.tls.enabled }}
- name: tls
  mountPath: /etc/inference-cache-tls
  readOnly: true
{{- end }}
{{- if .Values.tokens.secretName }}
- name: tokens
  mountPath: /etc/inference-cache-tokens
  readOnly: true
{{- end }}
{{- end }}

{{/* The TLS and token Secrets as volumes. */}}
{{- define "ic.secretVolumes" -}}
{{- if .Values.tls.enabled }}
- name: tls
  secret:
    secretName: {{ .Values.tls.secretName }}
{{- end }}
{{- if .Values.tokens.secretName }}
- name: tokens
  secret:
    secretName: {{ .Values.tokens.secretName }}
{{- end }}
{{- end }}

{{/* A container's restricted security context. */}}
{{- define "ic.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
{{- end }}
