// Package contract holds the Runtime contract test: one suite of
// behaviours every engine must show through hsbx's runtime layer, run
// against the fake docker, podman and kubectl and, when scripts/engines.sh
// and scripts/kube.sh have set them up (HSBX_IT_* variables), against real
// docker, rootful podman, rootless podman and the Kubernetes cluster (where
// a Pod differs by design — stop deletes it — the test says so). It has no
// non-test code.
package contract
