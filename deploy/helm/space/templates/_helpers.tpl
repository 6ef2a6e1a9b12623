{{/* Names and labels shared by every object. */}}
{{- define "space.name" -}}{{ .Release.Name }}{{- end -}}

{{- define "space.labels" -}}
app.kubernetes.io/part-of: space
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "space.selector" -}}
app.kubernetes.io/name: {{ .component }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end -}}

{{- define "space.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "space.secretName" -}}
{{- if .Values.secrets.create }}{{ include "space.name" . }}{{ else }}{{ .Values.secrets.existingSecret | default (include "space.name" .) }}{{ end -}}
{{- end -}}

{{- define "space.nodeSecretName" -}}
{{- $own := printf "%s-node" (include "space.name" .) -}}
{{- if .Values.secrets.create }}{{ $own }}{{ else }}{{ .Values.secrets.existingNodeSecret | default $own }}{{ end -}}
{{- end -}}

{{/* The settings every process shares (secrets come through envFrom). */}}
{{- define "space.env" -}}
- { name: SPACE_SUBSTRATE, value: kubernetes }
- { name: SPACE_KUBE_NAMESPACE, value: {{ .Values.sandboxNamespace.name | quote }} }
- { name: SPACE_LOG_LEVEL, value: {{ .Values.logLevel | quote }} }
{{- with .Values.blob.s3.endpoint }}
- { name: SPACE_S3_ENDPOINT, value: {{ . | quote }} }
{{- end }}
{{- with .Values.blob.s3.region }}
- { name: SPACE_S3_REGION, value: {{ . | quote }} }
{{- end }}
{{- if .Values.blob.s3.forcePathStyle }}
- { name: SPACE_S3_FORCE_PATH_STYLE, value: "true" }
{{- end }}
{{- range $k, $v := .Values.extraEnv }}
- { name: {{ $k }}, value: {{ $v | toString | quote }} }
{{- end }}
{{- end -}}

{{/* The control plane's own settings (api, controller, migrations). */}}
{{- define "space.controlPlaneEnv" -}}
{{ include "space.env" . }}
- { name: SPACE_DATA_DIR, value: /tmp/space }
{{- with .Values.sandboxDomain }}
- { name: SPACE_SANDBOX_DOMAIN, value: {{ . | quote }} }
{{- end }}
{{- with .Values.publicApiUrl }}
- { name: SPACE_PUBLIC_API_URL, value: {{ . | quote }} }
{{- end }}
{{- with .Values.publicGatewayUrl }}
- { name: SPACE_PUBLIC_GATEWAY_URL, value: {{ . | quote }} }
{{- end }}
{{- end -}}

{{- define "space.podSecurity" -}}
securityContext: { runAsNonRoot: true, runAsUser: 10001, runAsGroup: 10001, seccompProfile: { type: RuntimeDefault } }
{{- end -}}

{{- define "space.containerSecurity" -}}
securityContext: { allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: [ALL] } }
{{- end -}}

{{/* A value, or the same key of the Secret already in the cluster, or a new random one (kept across upgrades). */}}
{{- define "space.keep" -}}
{{- $given := index . 0 -}}{{- $existing := index . 1 -}}{{- $key := index . 2 -}}{{- $new := index . 3 -}}
{{- if $given -}}{{ $given | b64enc }}
{{- else if and $existing (hasKey $existing.data $key) -}}{{ index $existing.data $key }}
{{- else -}}{{ $new | b64enc }}
{{- end -}}
{{- end -}}
