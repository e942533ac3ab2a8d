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

{{/* How many replicas run: replicas, or 2 with leader election and 1 without. Two
replicas without leader election would both schedule (two active schedulers bind
conflicting pods): refused. */}}
{{- define "troupe.replicas" -}}
{{- if kindIs "invalid" .Values.replicas -}}
{{- ternary 2 1 (.Values.leaderElection.enabled | default false) -}}
{{- else -}}
{{- $n := int .Values.replicas -}}
{{- if and (gt $n 1) (not .Values.leaderElection.enabled) -}}
{{- fail (printf "replicas=%d with leaderElection.enabled=false: every replica would schedule, and two active schedulers bind conflicting pods; set replicas=1 or enable leader election" $n) -}}
{{- end -}}
{{- $n -}}
{{- end -}}
{{- end -}}

{{/* The pod's affinity: the user's, with the preferred anti-affinity term that puts
the replicas on different nodes added to its podAntiAffinity. */}}
{{- define "troupe.affinity" -}}
{{- $affinity := deepCopy (.Values.affinity | default dict) -}}
{{- $anti := $affinity.podAntiAffinity | default dict -}}
{{- $spread := dict "weight" 100 "podAffinityTerm" (dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" (include "troupe.selectorLabels" . | fromYaml))) -}}
{{- $preferred := $anti.preferredDuringSchedulingIgnoredDuringExecution | default list -}}
{{- $_ := set $anti "preferredDuringSchedulingIgnoredDuringExecution" (prepend $preferred $spread) -}}
{{- $_ := set $affinity "podAntiAffinity" $anti -}}
{{ toYaml $affinity }}
{{- end -}}

{{/* The schedulerNames pods opt in with: the configured profiles' (a lone profile
without one is Troupe's default, troupe-scheduler), or schedulerName. */}}
{{- define "troupe.schedulerNames" -}}
{{- $profiles := (.Values.config | default dict).profiles | default list -}}
{{- $names := list -}}
{{- range $profiles -}}
{{- $names = append $names (.schedulerName | default "troupe-scheduler") -}}
{{- end -}}
{{- if not $names -}}
{{- $names = list .Values.schedulerName -}}
{{- end -}}
{{- join " " $names -}}
{{- end -}}
