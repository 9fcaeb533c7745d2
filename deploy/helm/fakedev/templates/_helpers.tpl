{{/* Names and labels shared by every object of the release. */}}

{{- define "fakedev.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name: object names are DNS labels, so 63 characters at most. */}}
{{- define "fakedev.fullname" -}}
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

{{- define "fakedev.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fakedev.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "fakedev.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "fakedev.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "fakedev.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "fakedev.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name: give the existing ServiceAccount to use when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "fakedev.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The enabled driver schemas, in a fixed order, as a comma-separated list (empty: none). */}}
{{- define "fakedev.schemas" -}}
{{- $enabled := list -}}
{{- range $schema := list "nvidia" "dranet" "example" -}}
{{- if (index $.Values.drivers $schema).enabled -}}
{{- $enabled = append $enabled $schema -}}
{{- end -}}
{{- end -}}
{{- join "," $enabled -}}
{{- end -}}

{{/* allowPrivilegeEscalation must be true for a privileged container or one given CAP_SYS_ADMIN (API validation). */}}
{{- define "fakedev.allowPrivilegeEscalation" -}}
{{- if or .Values.securityContext.privileged (has "SYS_ADMIN" .Values.securityContext.capabilities.add) -}}
true
{{- else -}}
false
{{- end -}}
{{- end -}}
