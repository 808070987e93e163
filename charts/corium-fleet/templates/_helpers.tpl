{{/* Names ------------------------------------------------------------------ */}}

{{- define "corium-fleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name prefix (RELEASE-corium-fleet). Kept to 40 characters so that
"<prefix>-transactor-NN" and the StatefulSet's controller-revision-hash label
stay within Kubernetes' 63-character limits.
*/}}
{{- define "corium-fleet.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "corium-fleet.transactor.fullname" -}}
{{- printf "%s-transactor" (include "corium-fleet.fullname" .) }}
{{- end }}

{{/* The headless Service of the transactors (the StatefulSet's serviceName). */}}
{{- define "corium-fleet.transactor.headless" -}}
{{- include "corium-fleet.transactor.fullname" . }}
{{- end }}

{{- define "corium-fleet.ingress.fullname" -}}
{{- printf "%s-ingress" (include "corium-fleet.fullname" .) }}
{{- end }}

{{/* The client Service: the one address clients use. */}}
{{- define "corium-fleet.client.service" -}}
{{- include "corium-fleet.fullname" . }}
{{- end }}

{{- define "corium-fleet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "corium-fleet.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "corium-fleet.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels ----------------------------------------------------------------- */}}

{{- define "corium-fleet.labels" -}}
helm.sh/chart: {{ include "corium-fleet.chart" . }}
app.kubernetes.io/name: {{ include "corium-fleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: corium-fleet
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "corium-fleet.selectorLabels" -}}
app.kubernetes.io/name: {{ include "corium-fleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "corium-fleet.transactor.selectorLabels" -}}
{{ include "corium-fleet.selectorLabels" . }}
app.kubernetes.io/component: transactor
{{- end }}

{{- define "corium-fleet.ingress.selectorLabels" -}}
{{ include "corium-fleet.selectorLabels" . }}
app.kubernetes.io/component: ingress
{{- end }}

{{- define "corium-fleet.transactor.labels" -}}
{{ include "corium-fleet.labels" . }}
app.kubernetes.io/component: transactor
{{- end }}

{{- define "corium-fleet.ingress.labels" -}}
{{ include "corium-fleet.labels" . }}
app.kubernetes.io/component: ingress
{{- end }}

{{/* Fleet addressing ------------------------------------------------------- */}}

{{/* DNS suffix of transactor pods: "<headless>.<namespace>.svc". */}}
{{- define "corium-fleet.transactor.dnsSuffix" -}}
{{- printf "%s.%s.svc" (include "corium-fleet.transactor.headless" .) .Release.Namespace }}
{{- end }}

{{/* "true" when fleet.membership is static (a rendered `members` list), else empty. */}}
{{- define "corium-fleet.staticMembership" -}}
{{- if eq .Values.fleet.membership "static" }}true{{ end }}
{{- end }}

{{/* The node ids of the transactor pods ("<transactor fullname>-N"), as a JSON array. */}}
{{- define "corium-fleet.transactor.nodeIds" -}}
{{- $ids := list }}
{{- $name := include "corium-fleet.transactor.fullname" . }}
{{- range $i := until (int .Values.transactor.replicas) }}
{{- $ids = append $ids (printf "%s-%d" $name $i) }}
{{- end }}
{{- toJson $ids }}
{{- end }}

{{/* The members list, one "NODE_ID=ENDPOINT" per transactor pod, as a JSON array. */}}
{{- define "corium-fleet.members" -}}
{{- $members := list }}
{{- $name := include "corium-fleet.transactor.fullname" . }}
{{- $suffix := include "corium-fleet.transactor.dnsSuffix" . }}
{{- range $i := until (int .Values.transactor.replicas) }}
{{- $members = append $members (printf "%s-%d=https://%s-%d.%s:7001" $name $i $name $i $suffix) }}
{{- end }}
{{- toJson $members }}
{{- end }}

{{/* Placement map ----------------------------------------------------------- */}}

{{/* "true" when fleet.placementMap has content, else empty. */}}
{{- define "corium-fleet.placementMap.enabled" -}}
{{- if trim (toString .Values.fleet.placementMap) }}true{{ end }}
{{- end }}

{{- define "corium-fleet.placementMap.name" -}}
{{- printf "%s-placement-map" (include "corium-fleet.fullname" .) }}
{{- end }}

{{/* Where both pools read the map (`placement_map` in their node.toml). */}}
{{- define "corium-fleet.placementMap.path" -}}
/etc/corium-fleet/placement/placement-map
{{- end }}

{{/*
The map's volumeMount and volume. The ConfigMap is mounted as a directory, never with subPath:
only a directory mount receives the kubelet's updates, which the binaries re-read live.
*/}}
{{- define "corium-fleet.placementMap.volumeMount" -}}
{{- if include "corium-fleet.placementMap.enabled" . -}}
- name: placement-map
  mountPath: /etc/corium-fleet/placement
  readOnly: true
{{- end }}
{{- end }}

{{- define "corium-fleet.placementMap.volume" -}}
{{- if include "corium-fleet.placementMap.enabled" . -}}
- name: placement-map
  configMap:
    name: {{ include "corium-fleet.placementMap.name" . }}
{{- end }}
{{- end }}

{{/*
The chart's own check of fleet.placementMap, mirroring the binaries' (which refuse a bad map at
start with exit 2, and keep the previous map when a live edit is bad): every node must be a
transactor pod of this release, so a map that names a pod scaled away fails `helm upgrade`
instead of making restarted pods exit.
*/}}
{{- define "corium-fleet.placementMap.validate" -}}
{{- if include "corium-fleet.placementMap.enabled" . }}
{{- $pods := include "corium-fleet.transactor.nodeIds" . | fromJsonArray }}
{{- $want := int .Values.fleet.replicas }}
{{- $range := printf "%s … %s" (first $pods) (last $pods) }}
{{- $seen := dict }}
{{- range $index, $raw := splitList "\n" (toString .Values.fleet.placementMap) }}
{{- $line := add1 $index }}
{{- $content := trim (first (splitList "#" $raw)) }}
{{- if $content }}
{{- if not (contains "=" $content) }}
{{- fail (printf "fleet.placementMap line %d: expected `database = node, node`, got %q" $line $content) }}
{{- end }}
{{- $parts := splitn "=" 2 $content }}
{{- $db := trim $parts._0 }}
{{- if not (regexMatch "^[A-Za-z0-9_-]{1,128}$" $db) }}
{{- fail (printf "fleet.placementMap line %d: invalid database name %q: use 1-128 letters, digits, '-' or '_'" $line $db) }}
{{- end }}
{{- if hasKey $seen $db }}
{{- fail (printf "fleet.placementMap line %d: database %q is already mapped on line %d" $line $db (get $seen $db)) }}
{{- end }}
{{- $_ := set $seen $db $line }}
{{- $nodes := list }}
{{- range $node := splitList "," $parts._1 }}
{{- $node = trim $node }}
{{- if not $node }}
{{- fail (printf "fleet.placementMap line %d: empty node id in the list for %q" $line $db) }}
{{- end }}
{{- if has $node $nodes }}
{{- fail (printf "fleet.placementMap line %d: node %q is listed twice for %q" $line $node $db) }}
{{- end }}
{{- if not (has $node $pods) }}
{{- fail (printf "fleet.placementMap line %d: %q names %q, which is not a transactor pod of this release (%s)" $line $db $node $range) }}
{{- end }}
{{- $nodes = append $nodes $node }}
{{- end }}
{{- if lt (len $nodes) $want }}
{{- fail (printf "fleet.placementMap line %d: %q names %d node(s); placement needs fleet.replicas (%d)" $line $db (len $nodes) $want) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* Authentication ---------------------------------------------------------- */}}

{{/*
Stock Corium's authentication flags, rendered once for both pools: the ingress authenticates
clients, a node authenticates whoever calls it directly, so the two must never disagree
(docs/security.md). Both pools always get CORIUM_SERVE_TOKEN (the binaries' `--serve-token` env),
from auth.existingSecret or else from the Secret the chart generates (auth-token-secret.yaml),
never as an argument: so every rendering is strict, anonymous callers are refused and the public
development token is never accepted, whatever else auth.* says.
*/}}

{{/* The name of the token Secret the chart generates when auth.existingSecret is empty. */}}
{{- define "corium-fleet.auth.generatedSecretName" -}}
{{- printf "%s-token" (include "corium-fleet.fullname" .) }}
{{- end }}

{{/* The Secret and key of the token both pools accept, as JSON (name, key, generated). */}}
{{- define "corium-fleet.auth.tokenSecret" -}}
{{- if .Values.auth.existingSecret }}
{{- toJson (dict "name" .Values.auth.existingSecret "key" .Values.auth.existingSecretKey "generated" false) }}
{{- else }}
{{- toJson (dict "name" (include "corium-fleet.auth.generatedSecretName" .) "key" "token" "generated" true) }}
{{- end }}
{{- end }}

{{- define "corium-fleet.auth.env" -}}
{{- $secret := include "corium-fleet.auth.tokenSecret" . | fromJson -}}
- name: CORIUM_SERVE_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ $secret.name | quote }}
      key: {{ $secret.key | quote }}
{{- end }}

{{/* Where both pools read the OIDC issuer's JWKS: a directory mount of auth.oidc.jwksConfigMap. */}}
{{- define "corium-fleet.auth.jwksDir" -}}
/etc/corium-fleet/oidc
{{- end }}

{{- define "corium-fleet.auth.args" -}}
{{- $auth := .Values.auth -}}
- --operator-role
- {{ $auth.operatorRole | quote }}
{{- if $auth.requireAuth }}
- --require-auth
{{- end }}
{{- with $auth.oidc.issuer }}
- --oidc-issuer
- {{ . | quote }}
- --oidc-jwks-file
- {{ printf "%s/%s" (include "corium-fleet.auth.jwksDir" $) $auth.oidc.jwksConfigMapKey | quote }}
{{- range $auth.oidc.audiences }}
- --oidc-audience
- {{ . | quote }}
{{- end }}
{{- end }}
{{- end }}

{{- define "corium-fleet.auth.volumeMounts" -}}
{{- if .Values.auth.oidc.issuer -}}
- name: oidc-jwks
  mountPath: {{ include "corium-fleet.auth.jwksDir" . }}
  readOnly: true
{{- end }}
{{- end }}

{{/* The JWKS key only (a missing key keeps the pod from starting rather than starting strict with no keys). */}}
{{- define "corium-fleet.auth.volumes" -}}
{{- if .Values.auth.oidc.issuer -}}
- name: oidc-jwks
  configMap:
    name: {{ .Values.auth.oidc.jwksConfigMap | quote }}
    items:
      - key: {{ .Values.auth.oidc.jwksConfigMapKey | quote }}
        path: {{ .Values.auth.oidc.jwksConfigMapKey | quote }}
{{- end }}
{{- end }}

{{/* The checks of auth.oidc the schema cannot express (one value needs another). */}}
{{- define "corium-fleet.auth.validate" -}}
{{- $oidc := .Values.auth.oidc }}
{{- if and $oidc.issuer (not $oidc.jwksConfigMap) }}
{{- fail "auth.oidc.issuer needs auth.oidc.jwksConfigMap: the binaries read the issuer's JWKS from a file (--oidc-jwks-file) and do not fetch it" }}
{{- end }}
{{- if and $oidc.jwksConfigMap (not $oidc.issuer) }}
{{- fail "auth.oidc.jwksConfigMap is set without auth.oidc.issuer: name the issuer whose keys it holds, or leave both empty" }}
{{- end }}
{{- if and $oidc.audiences (not $oidc.issuer) }}
{{- fail "auth.oidc.audiences are set without auth.oidc.issuer: audiences apply only to the issuer's JWTs" }}
{{- end }}
{{- if and .Values.auth.authzBreakGlassRoles (not .Values.auth.authzDb) }}
{{- fail "auth.authzBreakGlassRoles needs auth.authzDb: break-glass roles are admitted only while the policy database cannot be read (--authz-break-glass-role requires --authz-db)" }}
{{- end }}
{{- include "corium-fleet.auth.validateArgs" (list "transactor" .Values.transactor.extraArgs) }}
{{- include "corium-fleet.auth.validateArgs" (list "ingress" .Values.ingress.extraArgs) }}
{{- end }}

{{/*
The flags no value may add through a pool's extraArgs, because each would undo the chart's
secure default: --serve-open turns authentication off, --dev-token-operator makes the public
development token an operator (only `corium-fleet dev` passes it), and --serve-token would put
the token on the command line (visible in the pod spec and to `ps`) and override the Secret.
Args: (list POOL EXTRA_ARGS).
*/}}
{{- define "corium-fleet.auth.validateArgs" -}}
{{- $pool := index . 0 }}
{{- $why := dict
  "--serve-open" "it turns authentication off and admits everyone as anonymous"
  "--dev-token-operator" "it makes the public development token an operator; only `corium-fleet dev` passes it"
  "--serve-token" "the token comes from auth.existingSecret (or the Secret the chart generates) through CORIUM_SERVE_TOKEN, never as an argument" }}
{{- range $arg := index . 1 }}
{{- $flag := first (splitList "=" (toString $arg)) }}
{{- if hasKey $why $flag }}
{{- fail (printf "%s.extraArgs: %s is refused: %s" $pool $flag (get $why $flag)) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Policy authorization (stock Corium's --authz-db), transactors only: every node authorizes the
calls it serves against the policy; the ingress forwards and decides nothing. The database name
goes through CORIUM_AUTHZ_DB (the flag's env), each break-glass role as one flag.
*/}}
{{- define "corium-fleet.authz.env" -}}
{{- with .Values.auth.authzDb -}}
- name: CORIUM_AUTHZ_DB
  value: {{ . | quote }}
{{- end }}
{{- end }}

{{- define "corium-fleet.authz.args" -}}
{{- if .Values.auth.authzDb }}
{{- range .Values.auth.authzBreakGlassRoles }}
- --authz-break-glass-role
- {{ . | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* Storage keys (encrypted databases) ------------------------------------------ */}}

{{/*
transactor.storageKeys, transactors only (the ingress never reads a database). Every entry's
Secret key is projected, read-only, into one volume as <id>/key, and passed as
`--storage-key file:/etc/corium-fleet/storage-keys/<id>/key` (corium_crypt's StaticKeyring reads
the file once, at start: 32 raw bytes or 64 hex digits). That whole string is the key id a
database created under the key records in its key manifest, and what every later open looks the
key up by, so it is made of the entry's `id` alone: the Secret and its key may change, the
directory and the file name never do.
*/}}
{{- define "corium-fleet.storageKeys.dir" -}}
/etc/corium-fleet/storage-keys
{{- end }}

{{/* The key id (`file:` ID) of one transactor.storageKeys entry. Args: the entry. */}}
{{- define "corium-fleet.storageKeys.keyId" -}}
{{- printf "file:%s/%s/key" (include "corium-fleet.storageKeys.dir" .) .id }}
{{- end }}

{{- define "corium-fleet.storageKeys.args" -}}
{{- range .Values.transactor.storageKeys }}
- --storage-key
- {{ include "corium-fleet.storageKeys.keyId" . | quote }}
{{- end }}
{{- end }}

{{- define "corium-fleet.storageKeys.volumeMounts" -}}
{{- if .Values.transactor.storageKeys -}}
- name: storage-keys
  mountPath: {{ include "corium-fleet.storageKeys.dir" . }}
  readOnly: true
{{- end }}
{{- end }}

{{/* Only the named key of each Secret; a missing Secret or key keeps the pod from starting. */}}
{{- define "corium-fleet.storageKeys.volumes" -}}
{{- with .Values.transactor.storageKeys -}}
- name: storage-keys
  projected:
    defaultMode: 0400
    sources:
      {{- range . }}
      - secret:
          name: {{ .secretName | quote }}
          items:
            - key: {{ .secretKey | quote }}
              path: {{ printf "%s/key" .id | quote }}
      {{- end }}
{{- end }}
{{- end }}

{{/*
Refuses what would keep transactors from starting, or start them without a key: an id listed twice
(two keys would share one key id), CORIUM_STORAGE_KEY in transactor.extraEnv (the --storage-key
flags win over it, so its keys would be dropped), and, when Helm can read the cluster (install,
upgrade, `helm template --dry-run=server`), an entry whose Secret or key is missing or does not
hold a key. Plain `helm template` and `helm lint` cannot see Secrets (`lookup` gives nothing), so
there the kubelet's refusal to mount a missing Secret or key, and the transactor's refusal to start
with a key it cannot read (naming it), are what stop a bad entry. Whether the cluster can be read
is told by the ConfigMap kube-root-ca.crt, which Kubernetes publishes in every namespace: a lookup
that finds it is a live one.
*/}}
{{- define "corium-fleet.storageKeys.validate" -}}
{{- $keys := .Values.transactor.storageKeys }}
{{- $seen := dict }}
{{- range $i, $key := $keys }}
{{- if hasKey $seen $key.id }}
{{- fail (printf "transactor.storageKeys.%d: id %q is already used by transactor.storageKeys.%d: two keys cannot share one key id (%s); give each key an id of its own" $i $key.id (get $seen $key.id) (include "corium-fleet.storageKeys.keyId" $key)) }}
{{- end }}
{{- $_ := set $seen $key.id $i }}
{{- end }}
{{- if $keys }}
{{- range .Values.transactor.extraEnv }}
{{- if eq (toString .name) "CORIUM_STORAGE_KEY" }}
{{- fail "transactor.extraEnv: CORIUM_STORAGE_KEY is ignored while transactor.storageKeys is set (the --storage-key flags the chart passes win over it): list the key in transactor.storageKeys, or pass it as another --storage-key in transactor.extraArgs" }}
{{- end }}
{{- end }}
{{- $ns := .Release.Namespace }}
{{- if lookup "v1" "ConfigMap" $ns "kube-root-ca.crt" }}
{{- range $i, $key := $keys }}
{{- $what := printf "transactor.storageKeys.%d (id %q, key id %s)" $i $key.id (include "corium-fleet.storageKeys.keyId" $key) }}
{{- $secret := lookup "v1" "Secret" $ns $key.secretName }}
{{- if not $secret }}
{{- fail (printf "%s: Secret %q does not exist in namespace %q; create it, with the key under %q, before installing or upgrading (docs/operations.md, \"Encrypted databases\")" $what $key.secretName $ns $key.secretKey) }}
{{- end }}
{{- $data := default dict (get $secret "data") }}
{{- if not (hasKey $data $key.secretKey) }}
{{- fail (printf "%s: Secret %q has no key %q (it has: %s)" $what $key.secretName $key.secretKey (join ", " (keys $data | sortAlpha) | default "none")) }}
{{- end }}
{{- $material := b64dec (get $data $key.secretKey) }}
{{- if and (ne (len $material) 32) (not (regexMatch "^[0-9A-Fa-f]{64}$" (trim $material))) }}
{{- fail (printf "%s: Secret %q key %q holds %d bytes, neither 32 raw bytes nor 64 hex digits (surrounding whitespace ignored), which is what a file: key must hold; e.g. `openssl rand -hex 32`" $what $key.secretName $key.secretKey (len $material)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* Images ------------------------------------------------------------------ */}}

{{- define "corium-fleet.transactor.image" -}}
{{- printf "%s:%s" .Values.transactor.image.repository (default .Chart.AppVersion .Values.transactor.image.tag) }}
{{- end }}

{{- define "corium-fleet.ingress.image" -}}
{{- printf "%s:%s" .Values.ingress.image.repository (default .Chart.AppVersion .Values.ingress.image.tag) }}
{{- end }}

{{/* Secrets ----------------------------------------------------------------- */}}

{{- define "corium-fleet.storage.secretName" -}}
{{- if eq .Values.storage.type "postgres" }}
{{- default (printf "%s-storage" (include "corium-fleet.fullname" .)) .Values.storage.postgres.existingSecret }}
{{- else }}
{{- default (printf "%s-storage" (include "corium-fleet.fullname" .)) .Values.storage.s3.existingSecret }}
{{- end }}
{{- end }}

{{/*
Where each transactor's certificate comes from, by tls.mode. Every mode but existingSecret gives
each transactor pod a certificate of its own that names its node id (the pod name):
- selfSigned: the chart generates one certificate per pod, all in one Secret
  (F-transactor-node-tls: ca.crt, and NODE_ID.crt / NODE_ID.key per pod), mounted whole;
- certManager: one cert-manager Certificate, so one Secret NODE_ID-tls, per pod, projected into
  one volume as NODE_ID.crt / NODE_ID.key (and ca.crt);
- certManagerCsi: an inline csi.cert-manager.io volume per pod (tls.crt, tls.key, ca.crt);
- existingSecret: the user's one Secret (tls.crt, tls.key, ca.crt), shared by every pod.
*/}}
{{- define "corium-fleet.tls.transactorSecret" -}}
{{- if eq .Values.tls.mode "existingSecret" }}
{{- .Values.tls.existingSecret.transactor }}
{{- else }}
{{- printf "%s-transactor-node-tls" (include "corium-fleet.fullname" .) }}
{{- end }}
{{- end }}

{{/* The Secret holding transactor pod NODE_ID's certificate in certManager mode. Args: NODE_ID. */}}
{{- define "corium-fleet.tls.podSecret" -}}
{{- printf "%s-tls" . }}
{{- end }}

{{- define "corium-fleet.tls.ingressSecret" -}}
{{- if eq .Values.tls.mode "existingSecret" }}
{{- .Values.tls.existingSecret.ingress }}
{{- else }}
{{- printf "%s-ingress-tls" (include "corium-fleet.fullname" .) }}
{{- end }}
{{- end }}

{{- define "corium-fleet.tls.publicSecret" -}}
{{- default (printf "%s-public-tls" (include "corium-fleet.fullname" .)) .Values.ingress.publicTls.secretName }}
{{- end }}

{{/*
"true" when the ingress serves client-facing TLS (port 4443), else empty. ingress.publicTls.enabled
null (the default) means on wherever there is a certificate for it: the chart issues one in every
mode but existingSecret, where it needs ingress.publicTls.secretName.
*/}}
{{- define "corium-fleet.tls.publicEnabled" -}}
{{- $public := .Values.ingress.publicTls }}
{{- $enabled := index $public "enabled" }}
{{- if kindIs "invalid" $enabled }}
{{- if or $public.secretName (ne .Values.tls.mode "existingSecret") }}true{{ end }}
{{- else if $enabled }}true{{ end }}
{{- end }}

{{/* Whether the chart issues the client-facing certificate itself. */}}
{{- define "corium-fleet.tls.issuePublic" -}}
{{- if and (include "corium-fleet.tls.publicEnabled" .) (not .Values.ingress.publicTls.secretName) }}true{{ end }}
{{- end }}

{{/* DNS names of transactor pod NODE_ID's own certificate. Args: (list $ctx NODE_ID). */}}
{{- define "corium-fleet.tls.podDnsNames" -}}
{{- $ctx := index . 0 }}
{{- $id := index . 1 }}
{{- $pod := printf "%s.%s" $id (include "corium-fleet.transactor.dnsSuffix" $ctx) }}
{{- toJson (list $id $pod (printf "%s.%s" $pod $ctx.Values.clusterDomain)) }}
{{- end }}

{{/* DNS names of the ingress client certificate. */}}
{{- define "corium-fleet.tls.ingressDnsNames" -}}
{{- $svc := printf "%s.%s.svc" (include "corium-fleet.ingress.fullname" .) .Release.Namespace }}
{{- toJson (list $svc (printf "%s.%s" $svc .Values.clusterDomain)) }}
{{- end }}

{{/* DNS names of the client-facing certificate. */}}
{{- define "corium-fleet.tls.publicDnsNames" -}}
{{- $name := include "corium-fleet.client.service" . }}
{{- $svc := printf "%s.%s.svc" $name .Release.Namespace }}
{{- $names := list $name (printf "%s.%s" $name .Release.Namespace) $svc (printf "%s.%s" $svc .Values.clusterDomain) }}
{{- toJson (concat $names .Values.ingress.publicTls.extraDnsNames) }}
{{- end }}

{{/* "true" when cert-manager issues the certificates (certManager, certManagerCsi), else empty. */}}
{{- define "corium-fleet.tls.certManager" -}}
{{- if has .Values.tls.mode (list "certManager" "certManagerCsi") }}true{{ end }}
{{- end }}

{{/* "true" when each transactor pod has a certificate of its own, naming its node id (every mode but existingSecret). */}}
{{- define "corium-fleet.tls.perPod" -}}
{{- if ne .Values.tls.mode "existingSecret" }}true{{ end }}
{{- end }}

{{/* "true" when each transactor pod gets its certificate from cert-manager's CSI driver. */}}
{{- define "corium-fleet.tls.csi" -}}
{{- if eq .Values.tls.mode "certManagerCsi" }}true{{ end }}
{{- end }}

{{/*
The transactor's certificate, key and CA files, as JSON (cert, key, ca). In selfSigned and
certManager modes the volume holds every pod's certificate, named by node id, and each pod picks
its own: Kubernetes expands $(CORIUM_FLEET_NODE_ID) (the pod name, from the downward API) in
the container's arguments.
*/}}
{{- define "corium-fleet.tls.transactorFiles" -}}
{{- $dir := "/etc/corium-fleet/tls" }}
{{- if has .Values.tls.mode (list "selfSigned" "certManager") }}
{{- toJson (dict "cert" (printf "%s/$(CORIUM_FLEET_NODE_ID).crt" $dir) "key" (printf "%s/$(CORIUM_FLEET_NODE_ID).key" $dir) "ca" (printf "%s/ca.crt" $dir)) }}
{{- else }}
{{- toJson (dict "cert" (printf "%s/tls.crt" $dir) "key" (printf "%s/tls.key" $dir) "ca" (printf "%s/ca.crt" $dir)) }}
{{- end }}
{{- end }}

{{/*
The issuer that signs cert-manager certificates, as JSON (name, kind, group): tls.certManager.issuerRef,
or the CA Issuer of the chain tls-certmanager.yaml creates when no issuer is named.
*/}}
{{- define "corium-fleet.tls.issuer" -}}
{{- $ref := .Values.tls.certManager.issuerRef }}
{{- if $ref.name }}
{{- toJson (dict "name" $ref.name "kind" $ref.kind "group" $ref.group) }}
{{- else }}
{{- toJson (dict "name" (printf "%s-ca" (include "corium-fleet.fullname" .)) "kind" "Issuer" "group" "cert-manager.io") }}
{{- end }}
{{- end }}

{{/*
--verify-node-identity, for both pools: a fleet member's certificate must name its node id (the
pod name) when it is dialled. Every chart-issued mode gives each transactor its own certificate
naming it, so the binaries' default (on) applies. Only a user-supplied shared certificate
(existingSecret, one certificate for *.<headless>.<namespace>.svc) names no node id: there the
check is turned off, and nodes present the token to each other instead.
*/}}
{{- define "corium-fleet.tls.nodeIdentityArgs" -}}
{{- if not (include "corium-fleet.tls.perPod" .) -}}
- --verify-node-identity
- "false"
{{- end }}
{{- end }}

{{/*
selfSigned mode's CA and certificates, as JSON: {"ca": CA certificate (base64),
"secrets": [{"name", "component", "type", "data"}]}. The CA and each certificate are read back
with `lookup` and kept: the CA while its Secret holds tls.crt and tls.key, each certificate while
its Secret's ca.crt is that CA (a missing or stale one is issued from the kept CA). Computed once
per rendering and memoized in .Values (under a key the schema forbids in user values), so the
Secrets and the pods' checksum/tls see the same CA even when nothing can be looked up (install,
`helm template`).
*/}}
{{- define "corium-fleet.tls.selfSigned" -}}
{{- if not (hasKey .Values "__coriumFleetSelfSigned") }}
{{- $fullname := include "corium-fleet.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- $days := int .Values.tls.selfSigned.validityDays }}
{{- $caName := printf "%s-ca" $fullname }}
{{- $oldCA := lookup "v1" "Secret" $ns $caName | default dict }}
{{- $oldCACrt := dig "data" "tls.crt" "" $oldCA }}
{{- $oldCAKey := dig "data" "tls.key" "" $oldCA }}
{{- $ca := dict }}
{{- if and $oldCACrt $oldCAKey }}
{{- $ca = buildCustomCert $oldCACrt $oldCAKey }}
{{- else }}
{{- $ca = genCA (printf "%s CA" $fullname) $days }}
{{- end }}
{{- $caCrt := $ca.Cert | b64enc }}
{{- $secrets := list (dict "name" $caName "component" "" "type" "kubernetes.io/tls"
      "data" (dict "tls.crt" $caCrt "tls.key" ($ca.Key | b64enc) "ca.crt" $caCrt)) }}
{{- /* Every transactor pod's own certificate, in one Secret under per-pod keys. */}}
{{- $nodeSecret := include "corium-fleet.tls.transactorSecret" . }}
{{- $old := lookup "v1" "Secret" $ns $nodeSecret | default dict }}
{{- $oldData := dig "data" dict $old }}
{{- $sameCA := eq (dig "data" "ca.crt" "" $old) $caCrt }}
{{- $nodes := dict "ca.crt" $caCrt }}
{{- range $id := include "corium-fleet.transactor.nodeIds" . | fromJsonArray }}
{{- $crt := "" }}
{{- $key := "" }}
{{- if $sameCA }}
{{- $crt = get $oldData (printf "%s.crt" $id) }}
{{- $key = get $oldData (printf "%s.key" $id) }}
{{- end }}
{{- if not (and $crt $key) }}
{{- $cert := genSignedCert $id nil (include "corium-fleet.tls.podDnsNames" (list $ $id) | fromJsonArray) $days $ca }}
{{- $crt = $cert.Cert | b64enc }}
{{- $key = $cert.Key | b64enc }}
{{- end }}
{{- $_ := set $nodes (printf "%s.crt" $id) $crt }}
{{- $_ := set $nodes (printf "%s.key" $id) $key }}
{{- end }}
{{- $secrets = append $secrets (dict "name" $nodeSecret "component" "transactor" "type" "Opaque" "data" $nodes) }}
{{- /* The ingress's client certificate and, when issued here, the client-facing one. */}}
{{- $leaves := list (dict "secret" (include "corium-fleet.tls.ingressSecret" .) "cn" (include "corium-fleet.ingress.fullname" .) "dns" (include "corium-fleet.tls.ingressDnsNames" . | fromJsonArray)) }}
{{- if include "corium-fleet.tls.issuePublic" . }}
{{- $leaves = append $leaves (dict "secret" (include "corium-fleet.tls.publicSecret" .) "cn" (include "corium-fleet.client.service" .) "dns" (include "corium-fleet.tls.publicDnsNames" . | fromJsonArray)) }}
{{- end }}
{{- range $leaf := $leaves }}
{{- $old := lookup "v1" "Secret" $ns $leaf.secret | default dict }}
{{- $crt := dig "data" "tls.crt" "" $old }}
{{- $key := dig "data" "tls.key" "" $old }}
{{- if not (and $crt $key (eq (dig "data" "ca.crt" "" $old) $caCrt)) }}
{{- $cert := genSignedCert $leaf.cn nil $leaf.dns $days $ca }}
{{- $crt = $cert.Cert | b64enc }}
{{- $key = $cert.Key | b64enc }}
{{- end }}
{{- $secrets = append $secrets (dict "name" $leaf.secret "component" "ingress" "type" "kubernetes.io/tls"
      "data" (dict "tls.crt" $crt "tls.key" $key "ca.crt" $caCrt)) }}
{{- end }}
{{- $_ := set .Values "__coriumFleetSelfSigned" (toJson (dict "ca" $caCrt "secrets" $secrets)) }}
{{- end }}
{{- get .Values "__coriumFleetSelfSigned" }}
{{- end }}

{{/*
The transactor's TLS volume. certManagerCsi: an inline CSI volume; cert-manager's csi-driver
generates the key on the node, requests a certificate named by the pod (it expands ${POD_NAME}),
renews it before expiry and writes tls.crt, tls.key and ca.crt readable by the container's group.
certManager: every pod's Secret projected into one directory (a pod template cannot name a Secret
per pod), each pod's files named by its node id; ca.crt from the first pod's Secret (one issuer
signs them all). selfSigned and existingSecret: one Secret, mounted whole.
*/}}
{{- define "corium-fleet.tls.transactorVolume" -}}
{{- if include "corium-fleet.tls.csi" . -}}
{{- $cm := .Values.tls.certManager }}
{{- $issuer := include "corium-fleet.tls.issuer" . | fromJson }}
{{- $pod := printf "${POD_NAME}.%s" (include "corium-fleet.transactor.dnsSuffix" .) }}
{{- $group := .Values.securityContext.runAsGroup | default .Values.podSecurityContext.runAsGroup | default .Values.podSecurityContext.fsGroup -}}
- name: tls
  csi:
    driver: csi.cert-manager.io
    readOnly: true
    volumeAttributes:
      csi.cert-manager.io/issuer-name: {{ $issuer.name | quote }}
      csi.cert-manager.io/issuer-kind: {{ $issuer.kind | quote }}
      csi.cert-manager.io/issuer-group: {{ $issuer.group | quote }}
      csi.cert-manager.io/common-name: "${POD_NAME}"
      csi.cert-manager.io/dns-names: {{ printf "${POD_NAME},%s,%s.%s" $pod $pod .Values.clusterDomain | quote }}
      csi.cert-manager.io/key-usages: "server auth,client auth,digital signature,key encipherment"
      csi.cert-manager.io/key-encoding: PKCS8
      csi.cert-manager.io/duration: {{ $cm.duration | quote }}
      csi.cert-manager.io/renew-before: {{ $cm.renewBefore | quote }}
      csi.cert-manager.io/certificate-file: tls.crt
      csi.cert-manager.io/privatekey-file: tls.key
      csi.cert-manager.io/ca-file: ca.crt
      {{- with $group }}
      csi.cert-manager.io/fs-group: {{ . | int64 | toString | quote }}
      {{- end }}
{{- else if eq .Values.tls.mode "certManager" -}}
- name: tls
  projected:
    defaultMode: 0440
    sources:
      {{- range $i, $id := include "corium-fleet.transactor.nodeIds" . | fromJsonArray }}
      - secret:
          name: {{ include "corium-fleet.tls.podSecret" $id }}
          items:
            - key: tls.crt
              path: {{ $id }}.crt
            - key: tls.key
              path: {{ $id }}.key
            {{- if eq $i 0 }}
            - key: ca.crt
              path: ca.crt
            {{- end }}
      {{- end }}
{{- else -}}
- name: tls
  secret:
    secretName: {{ include "corium-fleet.tls.transactorSecret" . }}
    defaultMode: 0440
{{- end }}
{{- end }}

{{/* Pod pieces -------------------------------------------------------------- */}}

{{/* Environment for the shared store (same for both pools). */}}
{{- define "corium-fleet.storage.env" -}}
{{- $secret := include "corium-fleet.storage.secretName" . }}
{{- if eq .Values.storage.type "postgres" }}
{{- $pg := .Values.storage.postgres -}}
- name: PG_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ if $pg.existingSecret }}{{ $pg.existingSecretKey }}{{ else }}password{{ end }}
- name: CORIUM_FLEET_STORAGE
  value: {{ printf "postgres://%s:$(PG_PASSWORD)@%s:%d/%s%s" $pg.user $pg.host (int $pg.port) $pg.database (ternary (printf "?%s" $pg.options) "" (ne (toString $pg.options) "")) | quote }}
{{- else if eq .Values.storage.type "s3" }}
{{- $s3 := .Values.storage.s3 -}}
- name: CORIUM_FLEET_STORAGE
  value: {{ printf "s3://%s/%s" $s3.bucket $s3.prefix | quote }}
- name: AWS_REGION
  value: {{ $s3.region | quote }}
{{- if $s3.endpoint }}
- name: CORIUM_FLEET_S3_ENDPOINT
  value: {{ $s3.endpoint | quote }}
{{- end }}
{{- if ne $s3.credentials "workloadIdentity" }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ if $s3.existingSecret }}{{ $s3.accessKeyIdKey }}{{ else }}AWS_ACCESS_KEY_ID{{ end }}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ if $s3.existingSecret }}{{ $s3.secretAccessKeyKey }}{{ else }}AWS_SECRET_ACCESS_KEY{{ end }}
{{- end }}
{{- else }}
{{- fail "storage.type must be postgres or s3" }}
{{- end }}
{{- end }}

{{/* Read-only storage access the transactors describe (storage.readOnly), for the storage type in use. */}}
{{- define "corium-fleet.storage.readOnlyEnv" -}}
{{- $ro := .Values.storage.readOnly }}
{{- if and (eq .Values.storage.type "postgres") $ro.postgresUrlSecret }}
- name: CORIUM_POSTGRES_READ_ONLY_URL
  valueFrom:
    secretKeyRef:
      name: {{ $ro.postgresUrlSecret | quote }}
      key: {{ $ro.postgresUrlSecretKey | quote }}
{{- else if and (eq .Values.storage.type "s3") $ro.s3Secret }}
- name: CORIUM_S3_READ_ONLY_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ $ro.s3Secret | quote }}
      key: {{ $ro.s3AccessKeyIdKey | quote }}
- name: CORIUM_S3_READ_ONLY_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $ro.s3Secret | quote }}
      key: {{ $ro.s3SecretAccessKeyKey | quote }}
{{- end }}
{{- end }}

{{- define "corium-fleet.backup.selectorLabels" -}}
{{ include "corium-fleet.selectorLabels" . }}
app.kubernetes.io/component: backup
{{- end }}

{{/*
preStop hook: sleep so the pod's endpoints are removed before SIGTERM starts the drain.
The image ships /usr/bin/sleep (distroless has no shell); nothing when the value is 0.
*/}}
{{- define "corium-fleet.preStop" -}}
{{- if gt (int .) 0 -}}
lifecycle:
  preStop:
    exec:
      command: ["/usr/bin/sleep", {{ . | int | toString | quote }}]
{{- end }}
{{- end }}

{{/*
Topology spread across zones for one pool.
Args: (list $ctx $component $spread $matchLabelKeys).
*/}}
{{- define "corium-fleet.zoneSpread" -}}
{{- $ctx := index . 0 }}
{{- $component := index . 1 }}
{{- $spread := index . 2 -}}
topologySpreadConstraints:
  - maxSkew: {{ $spread.maxSkew }}
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: {{ $spread.whenUnsatisfiable }}
    labelSelector:
      matchLabels:
        {{- include (printf "corium-fleet.%s.selectorLabels" $component) $ctx | nindent 8 }}
    {{- with index . 3 }}
    matchLabelKeys:
      {{- toYaml . | nindent 6 }}
    {{- end }}
{{- end }}

{{/* Checks the schema cannot express. */}}
{{- define "corium-fleet.validate" -}}
{{- if gt (int .Values.fleet.replicas) (int .Values.transactor.replicas) }}
{{- fail (printf "fleet.replicas (%d candidates per database) cannot exceed transactor.replicas (%d pods)" (int .Values.fleet.replicas) (int .Values.transactor.replicas)) }}
{{- end }}
{{- $t := .Values.transactor }}
{{- if gt (int $t.updatePartition) (int $t.replicas) }}
{{- fail (printf "transactor.updatePartition (%d) is past transactor.replicas (%d): at most replicas (which pauses the rollout), or lower to update pods" (int $t.updatePartition) (int $t.replicas)) }}
{{- end }}
{{- if lt (int $t.terminationGracePeriodSeconds) (add (int $t.preStopSleepSeconds) 10 | int) }}
{{- fail (printf "transactor.terminationGracePeriodSeconds (%d) must be at least transactor.preStopSleepSeconds (%d) + 10 so the SIGTERM drain has time to release the leases" (int $t.terminationGracePeriodSeconds) (int $t.preStopSleepSeconds)) }}
{{- end }}
{{- $i := .Values.ingress }}
{{- if lt (int $i.terminationGracePeriodSeconds) (add (int $i.preStopSleepSeconds) 10 | int) }}
{{- fail (printf "ingress.terminationGracePeriodSeconds (%d) must be at least ingress.preStopSleepSeconds (%d) + 10 so calls in flight have time to finish after the sleep" (int $i.terminationGracePeriodSeconds) (int $i.preStopSleepSeconds)) }}
{{- end }}
{{- $f := .Values.fleet }}
{{- if ge (int64 $f.registryRenewMs) (int64 $f.registryTtlMs) }}
{{- fail (printf "fleet.registryRenewMs (%d) must be below fleet.registryTtlMs (%d): a transactor renews its registry record before it expires" (int64 $f.registryRenewMs) (int64 $f.registryTtlMs)) }}
{{- end }}
{{- include "corium-fleet.placementMap.validate" . }}
{{- include "corium-fleet.auth.validate" . }}
{{- include "corium-fleet.storageKeys.validate" . }}
{{- if and .Values.ingress.autoscaling.enabled (gt (int .Values.ingress.autoscaling.minReplicas) (int .Values.ingress.autoscaling.maxReplicas)) }}
{{- fail "ingress.autoscaling.minReplicas cannot exceed ingress.autoscaling.maxReplicas" }}
{{- end }}
{{- if and (eq (toString (index .Values.ingress.publicTls "enabled")) "true") (eq .Values.tls.mode "existingSecret") (not .Values.ingress.publicTls.secretName) }}
{{- fail "ingress.publicTls.secretName is required when ingress.publicTls.enabled and tls.mode is existingSecret" }}
{{- end }}
{{- $s3 := .Values.storage.s3 }}
{{- if and (eq .Values.storage.type "s3") (eq $s3.credentials "workloadIdentity") (or $s3.existingSecret $s3.accessKeyId $s3.secretAccessKey) }}
{{- fail "storage.s3.credentials is workloadIdentity: the pods get no static keys, so leave storage.s3.existingSecret, accessKeyId and secretAccessKey empty (or set credentials: secret)" }}
{{- end }}
{{- $ro := .Values.storage.readOnly }}
{{- if and (eq .Values.storage.type "postgres") $ro.s3Secret }}
{{- fail "storage.readOnly.s3Secret is for storage.type s3; a PostgreSQL fleet takes storage.readOnly.postgresUrlSecret (the transactors refuse to start with the other kind)" }}
{{- end }}
{{- if and (eq .Values.storage.type "s3") $ro.postgresUrlSecret }}
{{- fail "storage.readOnly.postgresUrlSecret is for storage.type postgres; an S3 fleet takes storage.readOnly.s3Secret (the transactors refuse to start with the other kind)" }}
{{- end }}
{{- $b := .Values.backup }}
{{- if $b.enabled }}
{{- if not $b.persistentVolumeClaim }}
{{- fail "backup.persistentVolumeClaim is required when backup.enabled: the archives are kept on it (each run appends to them)" }}
{{- end }}
{{- if not (or (and (eq .Values.storage.type "postgres") $ro.postgresUrlSecret) (and (eq .Values.storage.type "s3") $ro.s3Secret)) }}
{{- fail "backup.enabled needs read-only storage access for the backups to read with: storage.readOnly.postgresUrlSecret (postgres) or storage.readOnly.s3Secret (s3)" }}
{{- end }}
{{- if lt (int64 $b.activeDeadlineSeconds) (int64 $b.timeoutSeconds) }}
{{- fail (printf "backup.activeDeadlineSeconds (%d) must be at least backup.timeoutSeconds (%d), one database's limit" (int64 $b.activeDeadlineSeconds) (int64 $b.timeoutSeconds)) }}
{{- end }}
{{- end }}
{{- $tr := .Values.tracing }}
{{- if and (or $tr.tls.secret $tr.tls.clientCertificate) (not (hasPrefix "https://" $tr.otlpEndpoint)) }}
{{- fail "tracing.tls.secret and tracing.tls.clientCertificate need an https:// tracing.otlpEndpoint (the nodes refuse TLS files for a plaintext collector)" }}
{{- end }}
{{- if and $tr.tls.clientCertificate (not $tr.tls.secret) }}
{{- fail "tracing.tls.clientCertificate needs tracing.tls.secret (its tls.crt and tls.key)" }}
{{- end }}
{{- if and (not $tr.otlpEndpoint) (or $tr.sampler $tr.samplerArg $tr.resourceAttributes) }}
{{- fail "tracing.sampler, tracing.samplerArg and tracing.resourceAttributes need tracing.otlpEndpoint: without it no span is exported" }}
{{- end }}
{{- end }}

{{/* Settings for node.toml ----------------------------------------------------- */}}

{{/*
`key = value` lines for node.toml from a values map, one per entry that is not null, so an unset
value leaves the binary's own default in force (nothing here restates a default). A null given in
the user's values removes the key from the merged values, so a missing key counts as null (`index`
gives nil for it; `get` would give "", which rendered as 0).
Args: (list $values $keys) with $keys a dict valueKey -> toml_key.
*/}}
{{- define "corium-fleet.tomlSettings" -}}
{{- $values := index . 0 }}
{{- $keys := index . 1 }}
{{- range $key := keys $keys | sortAlpha }}
{{- $value := index $values $key }}
{{- if not (kindIs "invalid" $value) }}
{{- if kindIs "bool" $value }}
{{ get $keys $key }} = {{ $value }}
{{- else if eq $key "retryBudgetRatio" }}
{{- $text := float64 $value | toString }}
{{ get $keys $key }} = {{ $text }}{{ if not (regexMatch "[.eE]" $text) }}.0{{ end }}
{{- else }}
{{ get $keys $key }} = {{ int64 $value }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Connections in one pool's PostgreSQL pool (`storage_pool_size`), from
storage.postgres.poolSize.<pool>: the number when the store is PostgreSQL and the value is set,
else nothing (the binary's default applies; the setting means nothing to S3).
Args: (list $ctx "transactor"|"ingress").
*/}}
{{- define "corium-fleet.storagePoolSize" -}}
{{- $ctx := index . 0 }}
{{- $size := index (default dict $ctx.Values.storage.postgres.poolSize) (index . 1) }}
{{- if and (eq $ctx.Values.storage.type "postgres") (not (kindIs "invalid" $size)) }}
{{- int64 $size }}
{{- end }}
{{- end }}

{{- define "corium-fleet.transactor.limitKeys" -}}
{{- toJson (dict
  "maxInflightCalls" "max_inflight_calls"
  "maxQueuedCalls" "max_queued_calls"
  "maxQueueWaitMs" "max_queue_wait_ms"
  "maxInflightPerDatabase" "max_inflight_per_database"
  "rateLimitPerPrincipal" "rate_limit_per_principal"
  "maxSubscriptions" "max_subscriptions"
  "maxSubscriptionsPerDatabase" "max_subscriptions_per_database"
  "maxSubscriptionsPerPrincipal" "max_subscriptions_per_principal") }}
{{- end }}

{{- define "corium-fleet.transactor.capacityKeys" -}}
{{- toJson (dict
  "idleEvictAfterMs" "idle_evict_after_ms"
  "memoryBudgetMib" "memory_budget_mib"
  "hotStandbys" "hot_standbys"
  "warmStandbyMib" "warm_standby_mib"
  "maxReplicas" "max_replicas"
  "replicaIdleMs" "replica_idle_ms") }}
{{- end }}

{{/*
fleet.* values rendered alike into both pools' node.toml (the same key, the same value: the
ingress refuses at its door exactly what a node would refuse).
*/}}
{{- define "corium-fleet.fleet.sharedKeys" -}}
{{- toJson (dict
  "maxRequestBytes" "max_request_bytes") }}
{{- end }}

{{- define "corium-fleet.ingress.limitKeys" -}}
{{- toJson (dict
  "maxConcurrentRequests" "max_concurrent_requests"
  "rateLimitPerClient" "rate_limit_per_client"
  "maxStreamsPerClient" "max_streams_per_client"
  "maxStreamsPerConnection" "max_streams_per_connection"
  "bodyProgressTimeoutMs" "body_progress_timeout_ms"
  "streamStallTimeoutMs" "stream_stall_timeout_ms"
  "maxConnectionIdleMs" "max_connection_idle_ms"
  "maxConnectionAgeMs" "max_connection_age_ms"
  "adaptiveNodeLimit" "adaptive_node_limit"
  "retryBudgetRatio" "retry_budget_ratio"
  "retryBudgetMinPerSecond" "retry_budget_min_per_second"
  "maxConnections" "max_connections"
  "maxConnectionsPerClient" "max_connections_per_client"
  "prefaceTimeoutMs" "preface_timeout_ms") }}
{{- end }}

{{/*
Logging of one pool: the filter (`log`) and the line format (logFormat, the same on both pools),
as CORIUM_FLEET_LOG and CORIUM_FLEET_LOG_FORMAT (the flags' environment variables), which win over
the --config file the binaries merge before they set logging up.
Args: (list $ctx $filter).
*/}}
{{- define "corium-fleet.log.env" -}}
{{- $ctx := index . 0 -}}
- name: CORIUM_FLEET_LOG
  value: {{ index . 1 | quote }}
{{- with $ctx.Values.logFormat }}
- name: CORIUM_FLEET_LOG_FORMAT
  value: {{ . | quote }}
{{- end }}
{{- end }}

{{/*
The transactor's drain deadline (`drain_deadline_ms`): SIGTERM comes after the preStop sleep, and
the kubelet kills the process terminationGracePeriodSeconds after the pod began to stop, so the
drain gets the grace period minus the sleep minus 5 s for the exit itself (releasing what is
left, deleting the registry record). The validation keeps it at least 5 s.
*/}}
{{- define "corium-fleet.transactor.drainDeadlineMs" -}}
{{- $t := .Values.transactor }}
{{- mul (sub (sub (int $t.terminationGracePeriodSeconds) (int $t.preStopSleepSeconds)) 5) 1000 }}
{{- end }}

{{/* The ingress's drain time (`drain_timeout_ms`), on the same rule: grace - preStop sleep - 5 s. */}}
{{- define "corium-fleet.ingress.drainTimeoutMs" -}}
{{- $i := .Values.ingress }}
{{- mul (sub (sub (int $i.terminationGracePeriodSeconds) (int $i.preStopSleepSeconds)) 5) 1000 }}
{{- end }}

{{/* Tracing --------------------------------------------------------------------- */}}

{{/*
OpenTelemetry span export (both pools): the standard OTEL_* variables the binaries read, only when
tracing.otlpEndpoint is set. The pod name reaches OTEL_RESOURCE_ATTRIBUTES through the downward
API (Kubernetes substitutes $(CORIUM_FLEET_POD_NAME) when the container starts).
*/}}
{{/* The collector's TLS Secret (tracing.tls.secret), in both pools. */}}
{{- define "corium-fleet.tracing.volumeMounts" -}}
{{- if and .Values.tracing.otlpEndpoint .Values.tracing.tls.secret -}}
- name: otlp-tls
  mountPath: /etc/corium-fleet/otlp-tls
  readOnly: true
{{- end }}
{{- end }}

{{- define "corium-fleet.tracing.volumes" -}}
{{- if and .Values.tracing.otlpEndpoint .Values.tracing.tls.secret -}}
- name: otlp-tls
  secret:
    secretName: {{ .Values.tracing.tls.secret | quote }}
    defaultMode: 0440
{{- end }}
{{- end }}

{{- define "corium-fleet.tracing.env" -}}
{{- $tr := .Values.tracing }}
{{- if $tr.otlpEndpoint -}}
{{- $attrs := list (printf "k8s.namespace.name=%s" .Release.Namespace) "k8s.pod.name=$(CORIUM_FLEET_POD_NAME)" }}
{{- range $key := keys $tr.resourceAttributes | sortAlpha }}
{{- $attrs = append $attrs (printf "%s=%s" $key (get $tr.resourceAttributes $key)) }}
{{- end -}}
- name: CORIUM_FLEET_POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ $tr.otlpEndpoint | quote }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: {{ $tr.protocol | quote }}
{{- if $tr.tls.secret }}
- name: OTEL_EXPORTER_OTLP_CERTIFICATE
  value: /etc/corium-fleet/otlp-tls/ca.crt
{{- end }}
{{- if $tr.tls.clientCertificate }}
- name: OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE
  value: /etc/corium-fleet/otlp-tls/tls.crt
- name: OTEL_EXPORTER_OTLP_CLIENT_KEY
  value: /etc/corium-fleet/otlp-tls/tls.key
{{- end }}
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ join "," $attrs | quote }}
{{- with $tr.sampler }}
- name: OTEL_TRACES_SAMPLER
  value: {{ . | quote }}
{{- end }}
{{- with $tr.samplerArg }}
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* Escape hatches ---------------------------------------------------------------- */}}

{{/*
Fails when a name repeats in a list the chart merges with the user's (env, volumes, mounts,
containers): a repeated name would silently shadow, or be refused by the API server.
Args: (list WHAT FIELD ITEMS).
*/}}
{{- define "corium-fleet.uniqueNames" -}}
{{- $what := index . 0 }}
{{- $field := index . 1 }}
{{- $seen := dict }}
{{- range $item := index . 2 }}
{{- $name := toString (get $item $field) }}
{{- if hasKey $seen $name }}
{{- fail (printf "%s: %s %q is already used (by the chart, or earlier in the list); pick another" $what $field $name) }}
{{- end }}
{{- $_ := set $seen $name true }}
{{- end }}
{{- end }}

{{/* Monitoring ---------------------------------------------------------------------- */}}

{{/* PromQL label matchers for this release's series (metrics.selectors). Args: (list $ctx "transactor"|"ingress"). */}}
{{- define "corium-fleet.metrics.selector" -}}
{{- $ctx := index . 0 }}
{{- $pool := index . 1 }}
{{- $given := get $ctx.Values.metrics.selectors $pool }}
{{- if $given }}
{{- $given }}
{{- else if eq $pool "transactor" }}
{{- printf "namespace=%q,job=%q" $ctx.Release.Namespace (include "corium-fleet.transactor.headless" $ctx) }}
{{- else }}
{{- printf "namespace=%q,job=%q" $ctx.Release.Namespace (printf "%s-admin" (include "corium-fleet.ingress.fullname" $ctx)) }}
{{- end }}
{{- end }}

{{/* The test Pod ---------------------------------------------------------------------- */}}

{{- define "corium-fleet.test.image" -}}
{{- $img := .Values.test.image }}
{{- printf "%s:%s" (default .Values.ingress.image.repository $img.repository) (default (default .Chart.AppVersion .Values.ingress.image.tag) $img.tag) }}
{{- end }}

{{/* The Secret and key of the token the test presents, as JSON: test.existingSecret, else the fleet's own token. */}}
{{- define "corium-fleet.test.token" -}}
{{- if .Values.test.existingSecret }}
{{- toJson (dict "name" .Values.test.existingSecret "key" .Values.test.existingSecretKey) }}
{{- else }}
{{- $secret := include "corium-fleet.auth.tokenSecret" . | fromJson }}
{{- toJson (dict "name" $secret.name "key" $secret.key) }}
{{- end }}
{{- end }}

{{- define "corium-fleet.test.selectorLabels" -}}
{{ include "corium-fleet.selectorLabels" . }}
app.kubernetes.io/component: test
{{- end }}
