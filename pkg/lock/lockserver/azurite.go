package lockserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
)

// The Azurite development account: well known, the same in every emulator, so
// not a secret.
const (
	AzuriteAccount = "devstoreaccount1"
	AzuriteKey     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// AzuriteEnv names the azurite-blob binary to run, when set.
const AzuriteEnv = "STOCKGUARD_AZURITE"

// AzuriteServer is a private Azurite (its blob service only).
type AzuriteServer struct {
	*Server
	// ConnectionString is the account's, for AZURE_STORAGE_CONNECTION_STRING.
	ConnectionString string
}

// AzuriteBinary finds azurite-blob: $STOCKGUARD_AZURITE, else azurite-blob on
// the PATH, else .tools/azurite/node_modules/.bin/azurite-blob under a
// module's root (a directory holding go.mod, from the working directory up:
// pkg/lock's own, then the repository's, where .ci/run installs it). It returns an error wrapping ErrNotInstalled, saying how to
// install it, when none is there.
func AzuriteBinary() (string, error) {
	if p := os.Getenv(AzuriteEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%w: %s=%s: %w", ErrNotInstalled, AzuriteEnv, p, err)
		}
		return p, nil
	}
	if p, err := exec.LookPath("azurite-blob"); err == nil {
		return p, nil
	}
	for _, root := range moduleRoots() {
		p := filepath.Join(root, ".tools", "azurite", "node_modules", ".bin", "azurite-blob")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: azurite-blob is neither in $%s, on the PATH nor in .tools/azurite; install it at the repository root with "+
		"`mkdir -p .tools/azurite && npm install --prefix .tools/azurite --no-audit --no-fund azurite@3.35.0` (needs Node 18+)",
		ErrNotInstalled, AzuriteEnv)
}

// moduleRoots are the directories at or above the working directory that hold
// go.mod, nearest first: pkg/lock is a module of its own inside the
// repository's. The walk ends at the filesystem's root, so it is bounded.
func moduleRoots() []string {
	dir, err := os.Getwd()
	if err != nil {
		return nil
	}
	var roots []string
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			roots = append(roots, dir)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return roots
		}
		dir = parent
	}
}

// StartAzurite starts azurite-blob on a free loopback port, keeping its data in
// a new directory under parent (a temporary one when parent is empty) so that
// Restart finds what it had persisted, and waits within ctx until a List
// Containers call answers.
func StartAzurite(ctx context.Context, parent string) (*AzuriteServer, error) {
	bin, err := AzuriteBinary()
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := newDir(parent, "azurite")
	if err != nil {
		return nil, err
	}
	addr := loopback(port)
	conn := AzuriteConnectionString(addr)
	svc, err := azblob.NewClientFromConnectionString(conn, &azblob.ClientOptions{
		ClientOptions: policy.ClientOptions{Retry: policy.RetryOptions{MaxRetries: -1}}, // waitReady polls
	})
	if err != nil {
		return nil, err
	}
	s, err := start(ctx, process{
		name: "azurite",
		// --loose and --skipApiVersionCheck: the SDK speaks a newer API version
		// than Azurite knows, and sends headers it does not.
		argv: []string{
			bin, "--blobHost", "127.0.0.1", "--blobPort", strconv.Itoa(port), "--location", dir,
			"--silent", "--skipApiVersionCheck", "--loose", "--disableTelemetry",
		},
		dir:  dir,
		addr: addr,
		ready: func(ctx context.Context, _ int) error {
			pager := svc.NewListContainersPager(nil)
			_, err := pager.NextPage(ctx)
			return err
		},
	})
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	return &AzuriteServer{Server: s, ConnectionString: conn}, nil
}

// AzuriteConnectionString is the development account's connection string for
// an Azurite blob service on addr (host:port).
func AzuriteConnectionString(addr string) string {
	return "DefaultEndpointsProtocol=http;AccountName=" + AzuriteAccount + ";AccountKey=" + AzuriteKey +
		";BlobEndpoint=http://" + addr + "/" + AzuriteAccount + ";"
}
