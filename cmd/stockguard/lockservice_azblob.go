package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/stockguard/stockguard/pkg/lock/azlease"
)

// azureConnStringEnv names the variable that holds the storage account of an
// azblob:// --lock-url: its connection string is a secret, so it is not in the
// URL.
const azureConnStringEnv = azlease.ConnectionStringEnv

// openAzblobLockService opens the Azure blob lease lock service of an
// azblob://<container>[/prefix] --lock-url, on the account of
// AZURE_STORAGE_CONNECTION_STRING (connString), which is never logged nor
// shown in an error. Open creates the container if it is missing, so an
// account that does not answer within startTimeout stops the replica here.
// Without a prefix in the URL the blobs are named <namespace>/<SKU>, as etcd's
// keys and ZooKeeper's nodes are per namespace.
func openAzblobLockService(ctx context.Context, u *url.URL, cfg serveConfig) (*lockService, error) {
	var opt *azlease.Options
	if strings.Trim(u.Path, "/") == "" {
		opt = &azlease.Options{Prefix: cfg.namespace + "/"}
	}
	octx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	b, closeIdle, err := azlease.Open(octx, cfg.lockURL, cfg.azureConnString, opt)
	if err != nil {
		return nil, fmt.Errorf("lock service azblob at %s: %w", redactedHost(u), err)
	}
	return &lockService{backend: b, kind: "azblob", ping: b.Ping, close: closeIdle}, nil
}
