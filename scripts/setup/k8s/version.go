package main

// Kept in step with K8S_VERSION in scripts/setup/k8s.sh.
const version = "v1.35.4"
