package main

// The same Kubernetes release as scripts/setup/k8s/version.go (the control plane).
const version = "v1.35.4"
