module corral.local/k8s/images

go 1.26.0
