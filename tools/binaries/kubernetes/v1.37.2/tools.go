//go:build tools

// Package kubernetes pins the Kubernetes commands the project builds from source: the local
// control plane's (kube-apiserver, kube-controller-manager, kubectl) and, for the offline kind
// node image, the node's and the rest of the control plane's (kubelet, kubeadm, kube-scheduler,
// kube-proxy).
package kubernetes

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
