{{/* Names and labels shared by every object of the chart. */}}
{{- define "hami-devices.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "hami-devices.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "hami-devices.labels" -}}
app.kubernetes.io/name: {{ include "hami-devices.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Selector labels of one component: include with (list $ "component"). */}}
{{- define "hami-devices.selector" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ include "hami-devices.name" $ }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "hami-devices.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The binary inside the image's (and the host's) virtual environment. */}}
{{- define "hami-devices.bin" -}}
{{ .Values.hostInstallDir }}/bin/hami-devices
{{- end -}}

{{/* The init container that copies the virtual environment to the same path on the host. Each file is
replaced, not written over: workload containers may have the limiter shim of the last copy mapped. */}}
{{- define "hami-devices.install" -}}
- name: install
  image: {{ include "hami-devices.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command: [sh, -c, "cp -a --remove-destination /opt/hami-devices/. /host-install/"]
  volumeMounts:
    - {name: install, mountPath: /host-install}
{{- end -}}

{{/* Volume mounts and volumes of the vendor libraries, and their environment. */}}
{{- define "hami-devices.vendorMounts" -}}
{{- range .Values.vendorLibraries }}
- {name: {{ printf "vendor-%s" .name | quote }}, mountPath: {{ .hostPath | quote }}, readOnly: true}
{{- end }}
{{- end -}}

{{- define "hami-devices.vendorVolumes" -}}
{{- range .Values.vendorLibraries }}
- {name: {{ printf "vendor-%s" .name | quote }}, hostPath: {path: {{ .hostPath | quote }}}}
{{- end }}
{{- end -}}

{{- define "hami-devices.vendorEnv" -}}
{{- range .Values.vendorLibraries }}
{{- range $key, $value := .env }}
- {name: {{ $key }}, value: {{ $value | quote }}}
{{- end }}
{{- end }}
{{- end -}}

{{- define "hami-devices.scheduling" -}}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
