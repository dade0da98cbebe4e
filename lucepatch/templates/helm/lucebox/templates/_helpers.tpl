{{/*
Lucebox chart helpers. The chart renders the same objects as `lucepatch render k8s lucebox` for the
same values (tests/test_helm_chart.py compares them); values and their meaning: values.yaml,
`lucepatch render k8s lucebox --show-values`. Every scalar is emitted with toJson, as the render
does, so a value cannot inject YAML.
*/}}

{{- define "lucebox.namespace" -}}
{{- .Values.namespace | default .Release.Namespace -}}
{{- end -}}

{{- define "lucebox.selector" -}}
{{- dict "app.kubernetes.io/name" "lucebox" "app.kubernetes.io/instance" .Values.name | toJson -}}
{{- end -}}

{{/* the selector labels win over user labels, as in the render */}}
{{- define "lucebox.labels" -}}
{{- merge (dict "app.kubernetes.io/name" "lucebox" "app.kubernetes.io/instance" .Values.name) (deepCopy (.Values.labels | default dict)) | toJson -}}
{{- end -}}

{{/* Olares injects workloads.<name>.replicaCount (OlaresManifest workloadReplicas) and installs at 0 first */}}
{{- define "lucebox.replicas" -}}
{{- $w := index (.Values.workloads | default dict) .Values.name -}}
{{- if $w -}}{{ $w.replicaCount | int }}{{- else -}}{{ .Values.replicas | int }}{{- end -}}
{{- end -}}

{{- define "lucebox.hfToken" -}}
{{- if .Values.hf_token_secret }}
            - name: HF_TOKEN
              valueFrom:
                secretKeyRef:
                  name: {{ .Values.hf_token_secret | toJson }}
                  key: {{ .Values.hf_token_key | toJson }}
                  optional: true
{{- end }}
{{- end -}}

{{/* env values may use the release's values (Olares: {{ .Values.olaresEnv.HF_TOKEN }}): tpl, over the value as
lucebox.envString writes it (render k8s writes the same: lucepatch/k8s/values.py env_string) */}}
{{- define "lucebox.extraEnv" -}}
{{- range $k, $v := ($.Values.env | default dict) }}
            - name: {{ $k | toJson }}
              value: {{ tpl (include "lucebox.envString" $v) $ | toJson }}
{{- end }}
{{- end -}}

{{/* a setting as the string `render k8s` writes (lucepatch/k8s/values.py env_string): helm reads a values file's
numbers as float64, whose toString would give 1.048576e+06 for 1048576; a boolean is true/false */}}
{{- define "lucebox.envString" -}}
{{- if and (kindIs "float64" .) (eq (. | int64 | float64) .) -}}{{ . | int64 | toString }}{{- else -}}{{ . | toString }}{{- end -}}
{{- end -}}
