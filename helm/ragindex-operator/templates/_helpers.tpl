{{/* Chart name, truncated to the 63 characters a label allows. */}}
{{- define "ragindex-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-qualified name used for every namespaced object. */}}
{{- define "ragindex-operator.fullname" -}}
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

{{- define "ragindex-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ragindex-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "ragindex-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "ragindex-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: ragindex
{{- end }}

{{- define "ragindex-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "ragindex-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Name of the kopf peering object; only used with more than one replica. */}}
{{- define "ragindex-operator.peering" -}}
{{- include "ragindex-operator.fullname" . }}
{{- end }}

{{/* The operator's rules on namespaced objects but Secrets: a ClusterRole's when it watches
every namespace, else a Role's in each watched one (rbac.yaml). */}}
{{- define "ragindex-operator.namespacedRules" -}}
# The resource it reconciles, its status, and finalizers (owner references with
# blockOwnerDeletion need update on the owner's finalizers).
- apiGroups: ["ragindex.dev"]
  resources: ["ragindexes"]
  verbs: ["get", "list", "watch", "patch", "update"]
- apiGroups: ["ragindex.dev"]
  resources: ["ragindexes/status"]
  verbs: ["get", "patch", "update"]
- apiGroups: ["ragindex.dev"]
  resources: ["ragindexes/finalizers"]
  verbs: ["update"]
# What it renders and prunes.
- apiGroups: ["ray.io"]
  resources: ["rayservices"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: ["elasticsearch.k8s.elastic.co"]
  resources: ["elasticsearches"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: ["kafka.strimzi.io"]
  resources: ["kafkas", "kafkanodepools", "kafkatopics", "kafkausers"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies", "ingresses"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
# spec.exposure.httpRoute (Gateway API; the operator checks its CRD before applying one).
- apiGroups: ["gateway.networking.k8s.io"]
  resources: ["httproutes"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: [""]
  resources: ["configmaps", "services"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
# Get by name: a model on a volume names its claim, which must exist (else ModelUnavailable).
# List and delete: only to prune the shared data claim an older operator version created.
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get", "list", "delete"]
- apiGroups: ["", "events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- if gt (int .Values.replicaCount) 1 }}
# Leader election between replicas: kopf peering (namespaced when namespaces are listed),
# and leases for anything lease-based.
- apiGroups: ["kopf.dev"]
  resources: ["kopfpeerings"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "list", "watch", "create", "update", "patch"]
{{- end }}
{{- end }}

{{/* The operator's rules on Secrets, in the RagIndex's own namespace: in each watched
namespace's Role, else in a ClusterRole bound per namespace (or cluster-wide when asked). */}}
{{- define "ragindex-operator.secretRules" -}}
# Get by name and create only (no list, no watch, no update): the operator reads the labels
# of the Secrets a RagIndex names, to refuse any without ragindex.dev/secret-for=<index>, and
# the Elasticsearch credentials and CA its alias switch uses; it makes <name>-report-token, the
# credential a generation's Router asks of whoever reads its build report (the operator
# itself), and for a managed Elasticsearch the scoped role and the pods' user (ECK's file
# realm). KubeRay creates the Ray token Secret, ECK its CA Secret, Strimzi the Kafka user's
# and cluster CA's; pods reference them directly.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create"]
{{- end }}

{{/* The ClusterRole holding secretRules when the operator watches every namespace. */}}
{{- define "ragindex-operator.secretsRole" -}}
{{- printf "%s-secrets" (include "ragindex-operator.fullname" .) }}
{{- end }}
