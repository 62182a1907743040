// Package contract holds the Runtime contract test: one suite of
// behaviours every engine must show through hsbx's runtime layer, run
// against the fake docker and podman and, when scripts/engines.sh has set
// them up (HSBX_IT_* variables), against real docker, rootful podman and
// rootless podman. It has no non-test code.
package contract
