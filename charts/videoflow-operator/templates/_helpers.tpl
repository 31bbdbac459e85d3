{{/* The chart's name, truncated to the 63 characters of a DNS label. */}}
{{- define "videoflow-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: the prefix of every object this chart makes. */}}
{{- define "videoflow-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "videoflow-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "videoflow-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "videoflow-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "videoflow-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: videoflow
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "videoflow-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "videoflow-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "videoflow-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "videoflow-operator.workerImage" -}}
{{- printf "%s:%s" .Values.workerImage.repository (default .Chart.AppVersion .Values.workerImage.tag) }}
{{- end }}

{{/*
The rules the operator needs, exactly operator/src/controller/permissions.rs
(REQUIRED_PERMISSIONS; operator/tests/rbac.rs compares them). No wildcards, no Secrets.
*/}}
{{- define "videoflow-operator.rules" -}}
- apiGroups: [""]
  resources: [configmaps, services]
  verbs: [create, delete, list, patch, watch]
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch]
- apiGroups: [apps]
  resources: [deployments, statefulsets]
  verbs: [create, delete, list, patch, watch]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [create, delete, list, patch, watch]
- apiGroups: [keda.sh]
  resources: [scaledobjects]
  verbs: [create, delete, list, patch]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [create, delete, list, patch, watch]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [videoflow.io]
  resources: [flows]
  verbs: [list, patch, watch]
- apiGroups: [videoflow.io]
  resources: [flows/finalizers]
  verbs: [update]
- apiGroups: [videoflow.io]
  resources: [flows/status]
  verbs: [patch]
{{- end }}
