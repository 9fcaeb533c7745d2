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

{{/* The fleet's objects: a name and pod labels of their own, so the DaemonSet's selector (and whatever finds the
plugin pods by app.kubernetes.io/name) never matches a fleet pod. */}}
{{- define "fakedev.fleet.fullname" -}}
{{- printf "%s-fleet" (include "fakedev.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "fakedev.fleet.selectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-fleet" (include "fakedev.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "fakedev.fleet.labels" -}}
{{ include "fakedev.labels" . }}
app.kubernetes.io/component: fleet
{{- end -}}

{{/* The fleet's own ServiceAccount (a kubelet's powers over many nodes stay off the plugin pods' token), or the
existing one named in serviceAccount.name. */}}
{{- define "fakedev.fleet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- include "fakedev.fleet.fullname" . -}}
{{- else -}}
{{- include "fakedev.serviceAccountName" . -}}
{{- end -}}
{{- end -}}

{{/* The schemas the DeviceClasses are installed for: the DaemonSet's enabled drivers and the fleet's schemas. */}}
{{- define "fakedev.classSchemas" -}}
{{- $wanted := list -}}
{{- if .Values.plugins.enabled -}}
{{- $wanted = splitList "," (include "fakedev.schemas" .) -}}
{{- end -}}
{{- if .Values.fleet.enabled -}}
{{- $wanted = concat $wanted .Values.fleet.schemas -}}
{{- end -}}
{{- $ordered := list -}}
{{- range $schema := list "nvidia" "dranet" "example" -}}
{{- if has $schema $wanted -}}
{{- $ordered = append $ordered $schema -}}
{{- end -}}
{{- end -}}
{{- join "," $ordered -}}
{{- end -}}

{{/* A pod's affinity (the value given, possibly empty) with "not an emulated node" added to every required node
selector term (terms are ORed, so each needs it), or as the only term when there is none: neither the plugin
DaemonSet nor the fleet belongs on a Node a fleet emulates. */}}
{{- define "fakedev.affinityOffEmulated" -}}
{{- $affinity := deepCopy (default dict .) -}}
{{- $node := default dict (get $affinity "nodeAffinity") -}}
{{- $required := default dict (get $node "requiredDuringSchedulingIgnoredDuringExecution") -}}
{{- $away := dict "key" "fakedev.io/emulated" "operator" "DoesNotExist" -}}
{{- $terms := list -}}
{{- range $term := default list (get $required "nodeSelectorTerms") -}}
{{- $terms = append $terms (set (deepCopy $term) "matchExpressions" (append (default list (get $term "matchExpressions")) $away)) -}}
{{- end -}}
{{- if not $terms -}}
{{- $terms = list (dict "matchExpressions" (list $away)) -}}
{{- end -}}
{{- $_ := set $required "nodeSelectorTerms" $terms -}}
{{- $_ = set $node "requiredDuringSchedulingIgnoredDuringExecution" $required -}}
{{- $_ = set $affinity "nodeAffinity" $node -}}
{{- toYaml $affinity -}}
{{- end -}}

{{/* KUBERNETES_SERVICE_HOST/PORT for clusters without kube-proxy (list items of a container's env). */}}
{{- define "fakedev.apiServerEnv" -}}
{{- with .Values.apiServer.host }}
- name: KUBERNETES_SERVICE_HOST
  value: {{ . | quote }}
{{- end }}
{{- with .Values.apiServer.port }}
- name: KUBERNETES_SERVICE_PORT
  value: {{ . | quote }}
{{- end }}
{{- end -}}

{{/* The explicit token volume (token, cluster CA, namespace) mounted at the usual ServiceAccount path: works whether
or not the cluster injects one (fakedev's local API server runs without the ServiceAccount admission plugin). */}}
{{- define "fakedev.apiAccessVolume" -}}
- name: api-access
  projected:
    defaultMode: 0444
    sources:
      - serviceAccountToken:
          path: token
          expirationSeconds: {{ .Values.serviceAccount.tokenExpirationSeconds }}
      - configMap:
          name: {{ .Values.apiServer.caConfigMap }}
          items:
            - key: ca.crt
              path: ca.crt
      - downwardAPI:
          items:
            - path: namespace
              fieldRef:
                apiVersion: v1
                fieldPath: metadata.namespace
{{- end -}}
