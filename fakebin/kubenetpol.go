package fakebin

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// The fake kubectl's NetworkPolicies, with kubectl v1.34's shapes
// (testdata/kube create_network_policy). The fake's Pods are host
// processes on the host's network, so no policy is enforced by the fake
// itself: what a Pod reaches is what the host reaches, and its node (a
// running Pod's hostIP) is FAKEKUBE_HOST_IP (default 127.0.0.1, where
// nothing listens on the kubelet's port; a test that listens there plays a
// cluster that does not enforce). FAKEKUBE_NETPOL_FORBIDDEN refuses every
// create as RBAC would.

func (f *fake) hostIP() string {
	if v := f.env["FAKEKUBE_HOST_IP"]; v != "" {
		return v
	}
	return "127.0.0.1"
}

// kcreateNetworkPolicy makes a policy from its manifest (generateName
// gets a suffix, as the API server gives it).
func (f *fake) kcreateNetworkPolicy(ns string, b []byte) int {
	var m struct {
		Metadata struct {
			Name            string            `json:"name"`
			GenerateName    string            `json:"generateName"`
			Labels          map[string]string `json:"labels"`
			OwnerReferences []struct {
				Kind string `json:"kind"`
				Name string `json:"name"`
				UID  string `json:"uid"`
			} `json:"ownerReferences"`
		} `json:"metadata"`
		Spec json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(b, &m); err != nil || m.Metadata.Name == "" && m.Metadata.GenerateName == "" {
		fmt.Fprintf(f.stderr, "error: error validating \"STDIN\": %v\n", err)
		return 1
	}
	if _, ok := f.env["FAKEKUBE_NETPOL_FORBIDDEN"]; ok {
		fmt.Fprintf(f.stderr, "Error from server (Forbidden): error when creating \"STDIN\": networkpolicies.networking.k8s.io is forbidden: User \"fake\" cannot create resource \"networkpolicies\" in API group \"networking.k8s.io\" in the namespace %q\n", ns)
		return 1
	}
	np := &NetworkPolicy{Namespace: ns, Name: m.Metadata.Name, Labels: m.Metadata.Labels}
	err := f.st.update(func(st *State) error {
		st.gcNetworkPolicies()
		st.Seq++
		if np.Name == "" {
			np.Name = m.Metadata.GenerateName + fmt.Sprintf("%05x", st.Seq)[:5]
		}
		if slices.ContainsFunc(st.NetworkPolicies, func(x *NetworkPolicy) bool { return x.Namespace == ns && x.Name == np.Name }) {
			return errAlreadyExists
		}
		np.UID = podUID(st.newID(np.Name, f.now))
		for _, o := range m.Metadata.OwnerReferences {
			np.OwnerUID = o.UID
		}
		meta := map[string]any{"name": np.Name, "namespace": ns, "uid": np.UID, "generation": 1, "resourceVersion": "1",
			"creationTimestamp": f.now.Format("2006-01-02T15:04:05Z"), "labels": np.Labels}
		if m.Metadata.GenerateName != "" {
			meta["generateName"] = m.Metadata.GenerateName
		}
		if len(m.Metadata.OwnerReferences) > 0 {
			meta["ownerReferences"] = m.Metadata.OwnerReferences
		}
		raw, _ := json.MarshalIndent(map[string]any{"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
			"metadata": meta, "spec": m.Spec}, "", "    ")
		np.Raw = raw
		st.NetworkPolicies = append(st.NetworkPolicies, np)
		return nil
	})
	if errors.Is(err, errAlreadyExists) {
		fmt.Fprintf(f.stderr, "Error from server (AlreadyExists): error when creating \"STDIN\": networkpolicies.networking.k8s.io %q already exists\n", np.Name)
		return 1
	}
	if err != nil {
		return f.fail(err)
	}
	fmt.Fprintln(f.stdout, string(np.Raw))
	return 0
}

// kgetNetworkPolicies is `get networkpolicies -o json`.
func (f *fake) kgetNetworkPolicies(ns string) int {
	items := []json.RawMessage{}
	if err := f.st.update(func(st *State) error {
		st.gcNetworkPolicies()
		for _, np := range st.NetworkPolicies {
			if np.Namespace == ns {
				items = append(items, np.Raw)
			}
		}
		return nil
	}); err != nil {
		return f.fail(err)
	}
	b, _ := json.MarshalIndent(map[string]any{"apiVersion": "v1", "kind": "List", "items": items}, "", "    ")
	fmt.Fprintln(f.stdout, string(b))
	return 0
}

// gcNetworkPolicies drops the policies whose owner Pod is gone, as the
// cluster's garbage collector does a moment after the Pod.
func (st *State) gcNetworkPolicies() {
	st.NetworkPolicies = slices.DeleteFunc(st.NetworkPolicies, func(np *NetworkPolicy) bool {
		return np.OwnerUID != "" && !slices.ContainsFunc(st.Containers, func(c *Container) bool {
			return c.Namespace == np.Namespace && strings.EqualFold(podUID(c.ID), np.OwnerUID)
		})
	})
}
