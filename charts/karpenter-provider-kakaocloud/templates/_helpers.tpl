{{- define "kk.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kk.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kk.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kk.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kk.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "kk.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "kk.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kk.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Endpoint overrides as the controller reads them: "bcs=https://...,iam=https://..." */}}
{{- define "kk.endpoints" -}}
{{- $pairs := list -}}
{{- range $service, $url := .Values.endpoints -}}
{{- $pairs = append $pairs (printf "%s=%s" $service $url) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}

{{/* The controller image: repository:tag, pinned with @digest when one is given. */}}
{{- define "kk.image" -}}
{{- $image := .Values.controller.image -}}
{{- $ref := printf "%s:%s" $image.repository ($image.tag | default .Chart.AppVersion) -}}
{{- if $image.digest }}{{ printf "%s@%s" $ref $image.digest }}{{ else }}{{ $ref }}{{ end -}}
{{- end }}
