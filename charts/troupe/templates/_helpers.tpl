{{/* The base name of every object: <release>-scheduler ("troupe-scheduler"). */}}
{{- define "troupe.fullname" -}}
{{- printf "%s-scheduler" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "troupe.selectorLabels" -}}
app.kubernetes.io/name: troupe
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "troupe.labels" -}}
{{ include "troupe.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The configuration file Troupe reads (--config). */}}
{{- define "troupe.config" -}}
{{- $cfg := deepCopy (.Values.config | default dict) -}}
{{- $troupe := deepCopy ($cfg.troupe | default dict) -}}
{{- $_ := set $troupe "metricsPort" (int .Values.metrics.port) -}}
{{- $_ := set $cfg "troupe" $troupe -}}
{{- if not $cfg.profiles -}}
{{- $_ := set $cfg "profiles" (list (dict "schedulerName" .Values.schedulerName)) -}}
{{- end -}}
{{- $le := dict "leaderElect" .Values.leaderElection.enabled "resourceName" .Values.leaderElection.resourceName "resourceNamespace" .Release.Namespace "leaseDuration" .Values.leaderElection.leaseDuration "renewDeadline" .Values.leaderElection.renewDeadline "retryPeriod" .Values.leaderElection.retryPeriod -}}
{{- $_ := set $cfg "leaderElection" $le -}}
{{- $_ := set $cfg "apiVersion" "kubescheduler.config.k8s.io/v1" -}}
{{- $_ := set $cfg "kind" "KubeSchedulerConfiguration" -}}
{{ toYaml $cfg }}
{{- end -}}
