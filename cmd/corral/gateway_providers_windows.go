package main

import "github.com/corral-sandbox/corral/gateway"

// gatewayProviderNames are the providers a gateway runs sandboxes on
// here: MXC, on the backend CORRAL_MXC_BACKEND names.
var gatewayProviderNames = []string{"mxc"}

// defaultGatewayProviders is --provider's default.
var defaultGatewayProviders = []string{"mxc"}

// gatewayProvider is the provider called name, nil for none of
// gatewayProviderNames.
func gatewayProvider(name string) gateway.Provider {
	if name == "mxc" {
		return mxcProvider() // the backend is the operator's (CORRAL_MXC_BACKEND), never a request's
	}
	return nil
}
