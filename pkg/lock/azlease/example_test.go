package azlease_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/azlease"
)

// A Client on Azure blob leases: Open creates the container if needed and
// gives the Backend to lock.NewClient. (No output is checked: it needs a
// storage account or Azurite.)
func Example() {
	ctx := context.Background()
	locks, closeIdle, err := azlease.Open(ctx, "azblob://stockguard-locks/sku/",
		os.Getenv(azlease.ConnectionStringEnv), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer closeIdle()
	client, err := lock.NewClient(locks, &lock.Options{TTL: 5 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = client.Close() }()

	wait, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err = client.Do(wait, []string{"A-1"}, func(ctx context.Context, g *lock.Grant) error {
		// Write with g.Token("A-1") as the fence; ctx ends if the lease is lost.
		fmt.Println("holding", g.Names(), "token", g.Token("A-1"))
		return nil
	})
	fmt.Println("err:", err)
}
