// The test main of the e2e binary that scripts/e2e-upstream.sh builds: upstream's runner
// (e2e.RunE2ETests) with only the spec packages the project's sets draw from, so the binary
// builds in a part of the time the whole suite takes. A spec of a package missing here would
// not run: `run` fails when fewer specs ran than its set names.
package specs

import (
	"flag"
	"os"
	"testing"

	"k8s.io/kubernetes/test/e2e"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"
	e2etestingmanifests "k8s.io/kubernetes/test/e2e/testing-manifests"

	// The feature and label constants, frozen before specs register.
	_ "k8s.io/kubernetes/test/e2e/feature"

	// The spec packages: NoExecuteTaintManager, Node Lifecycle and Pod Generation (node),
	// NodeLease (common/node), the untainted nodes (architecture), Kubectl taint (kubectl),
	// SchedulerPredicates and SchedulerPriorities (scheduling).
	_ "k8s.io/kubernetes/test/e2e/architecture"
	_ "k8s.io/kubernetes/test/e2e/common/node"
	_ "k8s.io/kubernetes/test/e2e/kubectl"
	_ "k8s.io/kubernetes/test/e2e/node"
	_ "k8s.io/kubernetes/test/e2e/scheduling"

	// The framework as the whole suite configures it.
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/metrics/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
	_ "k8s.io/kubernetes/test/utils/ktesting/format"
)

func TestMain(m *testing.M) {
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	testfiles.AddFileSource(e2etestingmanifests.GetE2ETestingManifestsFS())
	framework.AfterReadingAllFlags(&framework.TestContext)
	os.Exit(m.Run())
}

func TestE2E(t *testing.T) {
	e2e.RunE2ETests(t)
}
