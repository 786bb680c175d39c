{{- define "nlc.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "nlc.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "nlc.labels" -}}
app.kubernetes.io/name: {{ include "nlc.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{ include "nlc.meta" . }}
{{- end -}}

{{/* The labels that say which chart and version made an object (pods add their selector). */}}
{{- define "nlc.meta" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component: (dict "ctx" $ "component" "controller"). */}}
{{- define "nlc.selector" -}}
app.kubernetes.io/name: {{ include "nlc.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "nlc.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* `--name=value` per flag of a map (a list value repeats the flag), sorted by name. */}}
{{- define "nlc.flags" -}}
{{- range $name, $value := . }}
{{- if kindIs "slice" $value }}
{{- range $value }}
- {{ printf "--%s=%v" $name . | quote }}
{{- end }}
{{- else }}
- {{ printf "--%s=%v" $name $value | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The webhook's serving certificate Secret. */}}
{{- define "nlc.webhookTLSSecret" -}}
{{- default (printf "%s-webhook-tls" (include "nlc.fullname" .)) .Values.webhook.tls.secretName -}}
{{- end -}}

{{/* Pod security, shared by both Deployments. */}}
{{- define "nlc.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "nlc.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}
