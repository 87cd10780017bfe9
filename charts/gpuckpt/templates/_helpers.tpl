{{/* Names, labels and the derived settings every template shares. */}}

{{- define "gpuckpt.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpuckpt.fullname" -}}
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

{{- define "gpuckpt.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpuckpt.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
{{- end -}}

{{- define "gpuckpt.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "gpuckpt.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpuckpt
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "gpuckpt.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "gpuckpt.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "gpuckpt.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "gpuckpt.secretName" -}}
{{- default (printf "%s-token" (include "gpuckpt.fullname" .)) .Values.auth.existingSecret -}}
{{- end -}}

{{/* "true" when the agent talks to the Kubernetes API (and so needs its service-account token). */}}
{{- define "gpuckpt.usesKubeApi" -}}
{{- if or (include "gpuckpt.labelsThroughApi" .) (eq .Values.runtime.kind "kubelet") .Values.events.enabled -}}true{{- end -}}
{{- end -}}

{{/* "true" when node labels go through the API server (nodeLabels.method=api) rather than an NFD feature file. */}}
{{- define "gpuckpt.labelsThroughApi" -}}
{{- if and .Values.nodeLabels.enabled (eq .Values.nodeLabels.method "api") -}}true{{- end -}}
{{- end -}}

{{/* Where the pod sees the API token, the kubelet CA and the scripts. */}}
{{/* "true" when gpuckpt-nri runs: nri.enabled true, or auto with runtime.kind cri (containerd >= 2.0 and CRI-O have
NRI on by default; containerd has no hooks.d, so only NRI records its GPU containers). */}}
{{- define "gpuckpt.nriEnabled" -}}
{{- $e := .Values.nri.enabled -}}
{{- if eq (toString $e) "auto" -}}{{ eq .Values.runtime.kind "cri" }}{{- else -}}{{ $e }}{{- end -}}
{{- end -}}

{{/* The agent's runtime timeout (config.checkpoints.runtime_timeout_seconds, else the agent's default 600), its
shutdown grace (config.limits.shutdown_grace_seconds, else 30; 0 is a value) and the pod's termination grace: given,
else their sum + 30 s, so a job still in a runtime call when the grace ends finishes before the kubelet kills it. */}}
{{- define "gpuckpt.runtimeTimeout" -}}
{{- .Values.config.checkpoints.runtime_timeout_seconds | default 600 | int -}}
{{- end -}}
{{- define "gpuckpt.shutdownGrace" -}}
{{- $grace := .Values.config.limits.shutdown_grace_seconds -}}
{{- ternary 30 $grace (kindIs "invalid" $grace) | int -}}
{{- end -}}
{{- define "gpuckpt.terminationGrace" -}}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds -}}
{{- add (include "gpuckpt.runtimeTimeout" . | int) (include "gpuckpt.shutdownGrace" . | int) 30 -}}
{{- else -}}
{{- .Values.terminationGracePeriodSeconds | int -}}
{{- end -}}
{{- end -}}

{{- define "gpuckpt.tokenDir" -}}/etc/gpuckpt/auth{{- end -}}
{{- define "gpuckpt.registryDir" -}}/etc/gpuckpt/registry{{- end -}}
{{- define "gpuckpt.kubeletCaPath" -}}/etc/gpuckpt/kubelet-ca/ca.crt{{- end -}}
{{- define "gpuckpt.scriptsDir" -}}/opt/gpuckpt-chart{{- end -}}

{{/*
Drops null leaves and maps left empty, so the binary's own defaults apply to every setting not given.
Input: a map; output: JSON (read back with fromJson).
*/}}
{{- define "gpuckpt.compact" -}}
{{- $out := dict -}}
{{- range $key, $value := . -}}
{{- if kindIs "map" $value -}}
{{- $inner := include "gpuckpt.compact" $value | fromJson -}}
{{- if $inner -}}{{- $_ := set $out $key $inner -}}{{- end -}}
{{- else if not (kindIs "invalid" $value) -}}
{{- $_ := set $out $key $value -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/*
The agent's configuration file (agent/config.example.yaml shape). @NODE_NAME@ and @NODE_IP@ are replaced per pod
by the render-config init container (the agent reads literal values).
*/}}
{{- define "gpuckpt.agentConfig" -}}
{{- $v := .Values -}}
{{- $kubeletUrl := printf "https://kubernetes.default.svc/api/v1/nodes/@NODE_NAME@/proxy" -}}
{{- $kubeletCa := "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt" -}}
{{- if eq $v.runtime.kubelet.access "direct" -}}
{{- $kubeletUrl = printf "https://@NODE_IP@:%v" $v.runtime.kubelet.port -}}
{{- $kubeletCa = include "gpuckpt.kubeletCaPath" . -}}
{{- end -}}
{{- $criConfig := dict "call_timeout_seconds" $v.runtime.callTimeoutSeconds -}}
{{- $containerdConfig := dict "call_timeout_seconds" $v.runtime.callTimeoutSeconds "namespace" $v.runtime.containerdNamespace -}}
{{- if eq $v.runtime.kind "cri" }}{{ $_ := set $criConfig "endpoint" (printf "unix://%s" $v.runtime.criSocket) }}{{ end -}}
{{- if eq $v.runtime.kind "containerd" }}{{ $_ := set $containerdConfig "address" $v.runtime.criSocket }}{{ end -}}
{{- $registry := deepCopy $v.config.image_registry -}}
{{- if $v.imageRegistry.credentialsSecret -}}
{{- $_ := set $registry "credentials_file" (printf "%s/%s" (include "gpuckpt.registryDir" .) $v.imageRegistry.credentialsKey) -}}
{{- end -}}
{{- $config := dict
  "version" 1
  "listen" (dict "address" $v.agent.listenAddress "port" $v.agent.port)
  "auth" (dict "token_file" (printf "%s/%s" (include "gpuckpt.tokenDir" .) $v.auth.secretKey))
  "state_dir" $v.host.stateDir
  "checkpoints" (merge (dict "dir" $v.host.archiveDir "kubelet_dir" $v.host.kubeletCheckpointDir) (deepCopy $v.config.checkpoints))
  "runtime" (dict
    "kind" $v.runtime.kind
    "podman_path" $v.runtime.podmanPath
    "cri" $criConfig
    "containerd" $containerdConfig
    "kubelet" (dict
      "url" $kubeletUrl
      "token_file" "/var/run/secrets/kubernetes.io/serviceaccount/token"
      "ca_file" $kubeletCa))
  "host_root" "/host"
  "hooks_dir" $v.host.hooksDir
  "criu_plugin_dir" $v.host.criuPluginDir
  "log_level" $v.agent.logLevel
  "log_format" $v.agent.logFormat
  "match_policy" (deepCopy $v.config.match_policy)
  "node_labels" (dict "enabled" $v.nodeLabels.enabled "interval_seconds" $v.nodeLabels.intervalSeconds
    "method" (ternary "api" "nfd_feature_file" (eq $v.nodeLabels.method "api"))
    "feature_file" (ternary nil (printf "%s/gpuckpt" $v.nodeLabels.featureDir) (eq $v.nodeLabels.method "api")))
  "events" (dict "enabled" $v.events.enabled "queue_length" $v.events.queueLength
    "timeout_seconds" $v.events.timeoutSeconds)
  "gpu_memory" (deepCopy $v.config.gpu_memory)
  "retention" (deepCopy $v.config.retention)
  "transfer" (deepCopy $v.config.transfer)
  "image_registry" $registry
  "limits" (deepCopy $v.config.limits)
-}}
{{- if ne $v.runtime.kind "kubelet" -}}
{{- $_ := unset $config.runtime "kubelet" -}}
{{- end -}}
{{- include "gpuckpt.compact" $config | fromJson | toYaml -}}
{{- end -}}

{{/*
The hooks.d entries (containers/common oci-hooks 1.0.0), one per stage, as oci-hook/gpuckpt-hook*.json ship them
with the installed binary's path and this chart's state dir (the test compares them). Output: a JSON object
{file name: entry}.
*/}}
{{- define "gpuckpt.hookEntries" -}}
{{- $path := printf "%s/bin/gpuckpt-oci-hook" .Values.host.installDir -}}
{{- $entries := dict -}}
{{- range $file, $stage := dict "gpuckpt-hook.json" "createRuntime" "gpuckpt-hook-precreate.json" "precreate" "gpuckpt-hook-poststop.json" "poststop" -}}
{{- $when := dict "always" true -}}
{{- if eq $stage "precreate" -}}
{{- /* only restores carry a checkpoint id; every other container skips the rewrite stage */ -}}
{{- $when = dict "annotations" (dict "^io\\.gpuckpt\\.checkpoint-id$" ".+") -}}
{{- end -}}
{{- $_ := set $entries $file (dict
  "version" "1.0.0"
  "hook" (dict
    "path" $path
    "args" (list "gpuckpt-oci-hook" "--state-dir" $.Values.host.stateDir $stage)
    "timeout" $.Values.installer.hookTimeoutSeconds)
  "when" $when
  "stages" (list $stage)) -}}
{{- end -}}
{{- toJson $entries -}}
{{- end -}}
