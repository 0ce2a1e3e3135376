// Written by hand the way the collector builder (go.opentelemetry.io/collector/cmd/builder,
// ocb) generates its main.go; scripts/build_otelcol.sh builds it.

// Program otelcol-ragindex is a minimal OpenTelemetry Collector for ragindex's tests: the OTLP
// receiver and the file exporter, nothing else.
package main

import (
	"os"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	envprovider "go.opentelemetry.io/collector/confmap/provider/envprovider"
	fileprovider "go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/otelcol"
)

func main() {
	info := component.BuildInfo{
		Command:     "otelcol-ragindex",
		Description: "OpenTelemetry Collector for ragindex's tests (OTLP in, JSON lines out)",
		Version:     "0.161.0",
	}

	set := otelcol.CollectorSettings{
		BuildInfo: info,
		Factories: components,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: confmap.ResolverSettings{
				ProviderFactories: []confmap.ProviderFactory{
					envprovider.NewFactory(),
					fileprovider.NewFactory(),
				},
			},
		},
		ProviderModules: map[string]string{
			envprovider.NewFactory().Create(confmap.ProviderSettings{}).Scheme():  "go.opentelemetry.io/collector/confmap/provider/envprovider v1.67.0",
			fileprovider.NewFactory().Create(confmap.ProviderSettings{}).Scheme(): "go.opentelemetry.io/collector/confmap/provider/fileprovider v1.67.0",
		},
	}

	if err := otelcol.NewCommand(set).Execute(); err != nil {
		// cobra has logged the error already.
		os.Exit(1)
	}
}
