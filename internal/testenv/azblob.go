package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/stockguard/stockguard/pkg/lock/azlease"
	"github.com/stockguard/stockguard/pkg/lock/lockserver"
	"github.com/stockguard/stockguard/pkg/lock/lockserver/lockservertest"
)

// StartAzurite starts a private Azurite (blob service) for the test
// (lockservertest.Azurite: skipped without azurite-blob, see
// lockserver.AzuriteBinary, or failed under STOCKGUARD_TEST_REQUIRE_REAL=1).
func StartAzurite(t testing.TB) *lockserver.AzuriteServer {
	t.Helper()
	return lockservertest.Azurite(t)
}

// AzblobURL is an azblob:// --lock-url of a container of its own (created by
// the service) on s.
func AzblobURL(t testing.TB) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "azblob://locks-" + hex.EncodeToString(b) + "/sku/"
}

// UseAzurite starts a private Azurite, sets AZURE_STORAGE_CONNECTION_STRING
// to its account for the test (so the replicas it starts inherit it; the test
// must not be parallel), and returns an azblob:// --lock-url on it.
func UseAzurite(t testing.TB) string {
	t.Helper()
	s := StartAzurite(t)
	t.Setenv(azlease.ConnectionStringEnv, s.ConnectionString)
	return AzblobURL(t)
}

// AzblobToken reads the fencing token of resource name in the lock blobs of
// an azblob:// --lock-url, on the account of AZURE_STORAGE_CONNECTION_STRING:
// above 0 once a lock of name was taken there.
func AzblobToken(ctx context.Context, lockURL, name string) (int64, error) {
	loc, err := azlease.ParseURL(lockURL)
	if err != nil {
		return 0, err
	}
	svc, err := azblob.NewClientFromConnectionString(os.Getenv(azlease.ConnectionStringEnv), nil)
	if err != nil {
		return 0, err
	}
	p, err := svc.ServiceClient().NewContainerClient(loc.Container).NewBlobClient(loc.Prefix+name).GetProperties(ctx, nil)
	if err != nil {
		return 0, err
	}
	for k, v := range p.Metadata {
		if strings.EqualFold(k, "token") && v != nil {
			return strconv.ParseInt(*v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no token in the metadata of %s", loc.Prefix+name)
}
