module github.com/cozystack/reserved-ips/metallb-iad

go 1.26.0

require github.com/cozystack/reserved-ips/address-controller v0.0.0

replace github.com/cozystack/reserved-ips/address-controller => ../address-controller
