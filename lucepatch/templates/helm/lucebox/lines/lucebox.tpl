{{/*
The 8305b6c line (`lucepatch render helm lucebox`): lucepatch's own image (templates/docker/lucebox.Dockerfile.j2
and its entrypoint.sh.j2), which fetches the models itself: MODEL_DIR, PORT, DOWNLOAD_ONLY, HF_TOKEN.
The same text as lucepatch/templates/k8s/lucebox-lines/lucebox.j2.
*/}}

{{- define "lucebox.fetchModels" }}
        # The model download (~17 GB on first start) runs here, before the server container starts,
        # so it is outside the startup probe's budget; the entrypoint resumes a partial download.
        - name: fetch-models
          image: {{ .Values.image | toJson }}
          imagePullPolicy: {{ .Values.image_pull_policy | toJson }}
          env:
            - name: DOWNLOAD_ONLY
              value: "1"
            - name: MODEL_DIR
              value: {{ .Values.model_cache_mount | toJson }}
{{- include "lucebox.hfToken" . }}
{{- include "lucebox.extraEnv" . }}
          resources:
            requests:
              cpu: "500m"
              memory: "256Mi"
          volumeMounts:
            - name: model-cache
              mountPath: {{ .Values.model_cache_mount | toJson }}
{{- end -}}

{{- define "lucebox.serverEnv" }}
            - name: MODEL_DIR
              value: {{ .Values.model_cache_mount | toJson }}
            # the entrypoint starts dflash_server with --port "$PORT": the port reaches the server
            - name: PORT
              value: {{ .Values.port | int | toString | toJson }}
{{- include "lucebox.hfToken" . }}
{{- if .Values.cuda_device_memory_limit }}
            - name: CUDA_DEVICE_MEMORY_LIMIT_0
              value: {{ .Values.cuda_device_memory_limit | toString | toJson }}
{{- end }}
{{- include "lucebox.extraEnv" . }}
{{- end -}}

{{/* nothing beyond values.schema.json for this line */}}
{{- define "lucebox.check" -}}
{{- end -}}
