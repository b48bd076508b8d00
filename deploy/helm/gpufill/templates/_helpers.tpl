{{/* The chart's name, or nameOverride. */}}
{{- define "gpufill.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's resource names: fullnameOverride, else the release name when it
contains the chart's name, else "<release>-<name>". */}}
{{- define "gpufill.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "gpufill.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels that select this release's pods. */}}
{{- define "gpufill.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpufill.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "gpufill.labels" -}}
{{ include "gpufill.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The image: repository@digest when a digest is given, else repository:tag. */}}
{{- define "gpufill.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* Whether the PrometheusRule is rendered: prometheusRule.enabled, or when that is
null, serviceMonitor.enabled; never without the metrics endpoint. */}}
{{- define "gpufill.prometheusRule.enabled" -}}
{{- $on := .Values.serviceMonitor.enabled -}}
{{- if not (kindIs "invalid" .Values.prometheusRule.enabled) -}}
{{- $on = .Values.prometheusRule.enabled -}}
{{- end -}}
{{- if and $on .Values.metrics.enabled -}}true{{- end -}}
{{- end -}}

{{/* The required nodeAffinity: any of gpuNodeLabels (one term each, ORed), each term
without the opt-out label; when paused, a term no node meets (every node has
kubernetes.io/hostname). */}}
{{- define "gpufill.nodeAffinity" -}}
requiredDuringSchedulingIgnoredDuringExecution:
  nodeSelectorTerms:
    {{- range .Values.gpuNodeLabels }}
    - matchExpressions:
        - key: {{ .key }}
          operator: In
          values:
            - {{ .value | quote }}
        {{- with $.Values.disableNodeLabel }}
        - key: {{ . }}
          operator: NotIn
          values:
            - "true"
        {{- end }}
        {{- if $.Values.paused }}
        - key: kubernetes.io/hostname
          operator: DoesNotExist
        {{- end }}
    {{- end }}
{{- end -}}
