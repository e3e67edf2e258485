package lockserver_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/stockguard/stockguard/pkg/lock/lockserver"
)

// Azurite starts, answers with its connection string, and keeps a container it
// saved across Restart (same directory).
func TestAzurite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := lockserver.StartAzurite(ctx, t.TempDir())
	if errors.Is(err, lockserver.ErrNotInstalled) && os.Getenv("STOCKGUARD_TEST_REQUIRE_REAL") != "1" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	c, err := azblob.NewClientFromConnectionString(s.ConnectionString, &azblob.ClientOptions{
		ClientOptions: policy.ClientOptions{Retry: policy.RetryOptions{MaxRetries: -1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateContainer(ctx, "kept", nil); err != nil {
		t.Fatal(err)
	}
	// Azurite saves its metadata to disk every 5s (LokiJS autosave): a kill
	// loses what came after the last save. Wait for the save, bounded.
	saved := false
	for deadline := time.Now().Add(20 * time.Second); !saved && time.Now().Before(deadline); {
		b, _ := os.ReadFile(filepath.Join(s.Dir, "__azurite_db_blob__.json"))
		if saved = bytes.Contains(b, []byte(`"kept"`)); !saved {
			time.Sleep(100 * time.Millisecond) // polling a file another process writes
		}
	}
	if !saved {
		t.Fatal("Azurite did not save the container within 20s")
	}
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ServiceClient().NewContainerClient("kept").GetProperties(ctx, nil); err != nil {
		t.Fatalf("the container saved before the restart: %v", err)
	}
}
