{{/*
The vendored line (`lucepatch render helm lucebox-vendored`): upstream's own image (Luce-Org/lucebox's
Dockerfile, built by `lucepatch build lucebox-vendored --image`). Its ENTRYPOINT, server/scripts/entrypoint.sh,
reads DFLASH_* variables (lucepatch/data/lucebox_entrypoint.toml), looks for models under
/opt/lucebox-hub/server/models, and fetches nothing. The same text as
lucepatch/templates/k8s/lucebox-lines/lucebox-vendored.j2.
*/}}

{{- define "lucebox.fetchModels" }}
        # Upstream's entrypoint fetches nothing (without a target it stops), so the models are fetched first,
        # here, by the image's own `hf` (huggingface_hub in its venv), outside the startup probe's budget.
        - name: fetch-models
          image: {{ .Values.image | toJson }}
          imagePullPolicy: {{ .Values.image_pull_policy | toJson }}
          # through upstream's entrypoint, which execs a command it does not know as given
          args: {{ list "bash" "-c" (.Files.Get "files/fetch-models.sh") "fetch-models" .Values.model_cache_mount .Values.model_target_repo .Values.model_target_file (.Values.model_draft_repo | default "") (.Values.model_draft_file | default "") | toJson }}
          env:
            # huggingface_hub's own folder (token, xet cache): HOME is / for a uid the image does not know
            - name: HF_HOME
              value: {{ printf "%s/.huggingface" .Values.model_cache_mount | toJson }}
{{- include "lucebox.hfToken" . }}
{{- range $k, $v := (.Values.fetch_env | default dict) }}
            - name: {{ $k | toJson }}
              value: {{ tpl (include "lucebox.envString" $v) $ | toJson }}
{{- end }}
          resources:
            requests:
              cpu: "500m"
              memory: "256Mi"
          volumeMounts:
            - name: model-cache
              mountPath: {{ .Values.model_cache_mount | toJson }}
{{- end -}}

{{- define "lucebox.serverEnv" }}
            # upstream's entrypoint starts dflash_server with --port "$DFLASH_PORT"
            - name: DFLASH_PORT
              value: {{ .Values.port | int | toString | toJson }}
{{- if .Values.model_target_file }}
            - name: DFLASH_TARGET
              value: {{ printf "%s/%s" .Values.model_cache_mount .Values.model_target_file | toJson }}
{{- end }}
{{- if .Values.model_draft_file }}
            - name: DFLASH_DRAFT
              value: {{ printf "%s/draft" .Values.model_cache_mount | toJson }}
{{- end }}
{{- range $k, $v := (.Values.dflash | default dict) }}
            - name: {{ $k | toJson }}
              value: {{ include "lucebox.envString" $v | toJson }}
{{- end }}
{{- if .Values.cuda_device_memory_limit }}
            # HAMi's, read by libvgpu.so (not the entrypoint)
            - name: CUDA_DEVICE_MEMORY_LIMIT_0
              value: {{ .Values.cuda_device_memory_limit | toString | toJson }}
{{- end }}
{{- include "lucebox.extraEnv" . }}
{{- end -}}

{{/* what values.schema.json cannot say: the refusals of `render k8s lucebox-vendored` (k8s/manifests.py) */}}
{{- define "lucebox.check" -}}
{{- if and .Values.hf_token_secret (hasKey (.Values.fetch_env | default dict) "HF_TOKEN") }}
{{- fail "fetch_env.HF_TOKEN is set by the chart (HF_HOME: the cache's own folder; HF_TOKEN: from hf_token_secret, or set that to null)" }}
{{- end }}
{{- if ne (kindIs "invalid" .Values.model_draft_repo) (kindIs "invalid" .Values.model_draft_file) }}
{{- fail "model_draft_repo and model_draft_file go together: both, or both null (no draft)" }}
{{- end }}
{{- if and .Values.model_download_init (not .Values.model_target_file) }}
{{- fail "model_download_init fetches model_target_file from model_target_repo: name the file, or set model_download_init=false and put the target in the cache yourself" }}
{{- end }}
{{- if and (not .Values.model_target_file) (ne .Values.model_cache_mount "/opt/lucebox-hub/server/models") }}
{{- fail (printf "with model_target_file null the entrypoint looks for a target under /opt/lucebox-hub/server/models only, not under model_cache_mount %s: name the file" .Values.model_cache_mount) }}
{{- end }}
{{- end -}}
