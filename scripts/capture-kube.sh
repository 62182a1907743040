#!/usr/bin/env bash
# capture-kube.sh — record what a real kubectl and cluster print (stdout,
# stderr, exit code) for the calls a kubectl runtime makes and the failures
# it must classify, into testdata/kube/kubectl-<version>/<case>.*, as
# capture.sh does for docker and podman: the ground truth for a kubectl
# dialect's parsers and a fake kubectl.
#
# Usage: scripts/capture-kube.sh   (after scripts/kube.sh and `. /tmp/hsbx-kube/env.sh`)
set -uo pipefail
bin=${HSBX_IT_KUBECTL:-kubectl}
image=${HSBX_IT_KUBE_IMAGE:-hsbx-busybox}
class=${HSBX_IT_KUBE_STORAGE_CLASS:-hsbx-local}
v=$("$bin" version --client -o json | sed -n 's/.*"gitVersion": "\(v[^"]*\)".*/\1/p' | head -1)
out="$(cd "$(dirname "$0")/.." && pwd)/testdata/kube/kubectl-$v"
rm -rf "$out"
mkdir -p "$out"
echo "capturing $bin ($v) into $out" >&2

cap() { # cap NAME ARGS...   (stdin from the caller)
  local name=$1
  shift
  printf '%s\n' "$@" >"$out/$name.argv"
  "$bin" "$@" >"$out/$name.stdout" 2>"$out/$name.stderr"
  echo $? >"$out/$name.exit"
}

pod() { # pod NAME COMMAND_JSON RESTART: a pod as hardened as a sandbox would be
  cat <<JSON
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"$1","labels":{"hermes-agent":"1","hsbx.profile":"cap","hsbx.task":"$1"},
 "annotations":{"hsbx.key":"cap/$1"}},
 "spec":{"restartPolicy":"$3","terminationGracePeriodSeconds":1,"automountServiceAccountToken":false,
  "securityContext":{"seccompProfile":{"type":"RuntimeDefault"}},
  "containers":[{"name":"sandbox","image":"$image","imagePullPolicy":"Never","command":$2,"workingDir":"/",
   "securityContext":{"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"],"add":["CHOWN","DAC_OVERRIDE","FOWNER","SETUID","SETGID"]}},
   "resources":{"limits":{"cpu":"1","memory":"512Mi"}},
   "volumeMounts":[{"name":"tmp","mountPath":"/tmp"}]}],
  "volumes":[{"name":"tmp","emptyDir":{"medium":"Memory","sizeLimit":"64Mi"}}]}}
JSON
}

for p in cap-run cap-done cap-bad-image; do "$bin" delete pod "$p" --ignore-not-found --grace-period=0 --force >/dev/null 2>&1; done

cap version version -o json
cap version_client version --client -o json
cap auth_can_i auth can-i create pods
cap auth_can_i_exec auth can-i create pods --subresource=exec
cap current_context config view --minify -o json
cap get_none get pods -l hsbx.profile=nothing -o json
pod cap-run '["sleep","infinity"]' Never | cap create_run create -f - -o json
pod cap-run '["sleep","infinity"]' Never | cap create_exists create -f - -o json
pod cap-done '["true"]' Never | cap create_done create -f - -o json
pod cap-bad-image '["true"]' Never | sed "s/\"$image\"/\"nosuchimage:1\"/" | cap create_bad_image create -f - -o json
# A RuntimeClass the cluster lacks (oci_runtime): the admission refuses it.
pod cap-no-class '["true"]' Never | sed 's/"restartPolicy"/"runtimeClassName":"hsbx-no-such-class","restartPolicy"/' | cap create_unknown_runtime_class create -f - -o json
cap get_runtimeclasses get runtimeclasses -o json
"$bin" wait --for=condition=Ready pod/cap-run --timeout=60s >/dev/null
for _ in $(seq 1 60); do [ "$("$bin" get pod cap-done -o 'jsonpath={.status.phase}')" = Succeeded ] && break; sleep 0.5; done
sleep 2
cap get_one get pod cap-run -o json
cap get_missing get pod cap-nonexist -o json
cap get_label get pods -l hsbx.profile=cap -o json
cap exec_ok exec cap-run -c sandbox -- echo hi
cap exec_exit3 exec cap-run -c sandbox -- sh -c 'echo out; echo err >&2; exit 3'
cap exec_not_found exec cap-run -c sandbox -- nosuchcmd
cap exec_missing exec cap-nonexist -c sandbox -- true
cap exec_done exec cap-done -c sandbox -- true
cap exec_words exec cap-run -c sandbox -- sh -c 'echo "command terminated with exit code 7" >&2; exit 1'
echo stdin-ok | cap exec_stdin exec -i cap-run -c sandbox -- cat
# network = off / allow: the Pod's deny-all NetworkPolicy, owned by it
runuid=$("$bin" get pod cap-run -o 'jsonpath={.metadata.uid}')
echo '{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy","metadata":{"generateName":"cap-run-deny-","labels":{"hsbx.profile":"cap","hsbx.task":"cap-run"},
 "ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":"cap-run","uid":"'"$runuid"'"}]},
 "spec":{"podSelector":{"matchLabels":{"hsbx.profile":"cap","hsbx.task":"cap-run"}},"policyTypes":["Ingress","Egress"]}}' |
  cap create_network_policy create -f - -o json
cap delete_missing delete pod cap-nonexist --wait=false
cap delete_run delete pod cap-run --wait=false
cap delete_done delete pod cap-done cap-bad-image --wait=false
# claims (kubernetes.storage_class): the class looked up, a claim made, met
# again, read, and deleted through the API with a uid precondition
claim() { # claim NAME
  cat <<JSON
{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"$1","labels":{"hsbx.profile":"cap","hsbx.task":"$1"},"annotations":{"hsbx.key":"cap/$1"}},
 "spec":{"accessModes":["ReadWriteOnce"],"storageClassName":"$class","resources":{"requests":{"storage":"1Gi"}}}}
JSON
}
"$bin" delete pvc cap-claim --ignore-not-found --wait=true >/dev/null 2>&1
cap class_ok get storageclasses -o name --ignore-not-found "$class"
cap class_missing get storageclasses -o name --ignore-not-found nosuchclass
cap claim_get_none get persistentvolumeclaims -o json --ignore-not-found cap-claim
claim cap-claim | cap claim_create create -f - -o json
claim cap-claim | cap claim_create_exists create -f - -o json
cap claim_get get persistentvolumeclaims -o json --ignore-not-found cap-claim
uid=$("$bin" get pvc cap-claim -o 'jsonpath={.metadata.uid}')
ns=$("$bin" config view --minify -o 'jsonpath={..namespace}')
echo '{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"00000000-0000-0000-0000-000000000000"}}' |
  cap claim_delete_other_uid delete --raw "/api/v1/namespaces/${ns:-default}/persistentvolumeclaims/cap-claim" -f -
echo '{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"'"$uid"'"}}' |
  cap claim_delete delete --raw "/api/v1/namespaces/${ns:-default}/persistentvolumeclaims/cap-claim" -f -
"$bin" wait --for=delete pvc/cap-claim --timeout=30s >/dev/null 2>&1

KUBECONFIG=/nonexistent cap down_no_config get pods -o json
"$bin" config view --raw >"$out/.kc"
sed -i 's#server: .*#server: https://127.0.0.1:1#' "$out/.kc"
KUBECONFIG=$out/.kc cap down_get get pods -o json --request-timeout=5s
rm -f "$out/.kc"
# the client's certificate paths are this machine's: keep them out
sed -i "s#$HOME#HOME#g; s#/tmp/hsbx-kube#KUBE_DIR#g" "$out"/*.stdout "$out"/*.stderr
echo "done: $(ls "$out" | wc -l) files" >&2
