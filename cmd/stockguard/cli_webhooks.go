package main

import (
	"cmp"
	"context"
	"strconv"

	sgclient "github.com/stockguard/stockguard/pkg/client"
)

// webhooks: the endpoints that get the stock events (docs/events.md).

func webhooksSubs() []subcommand {
	return []subcommand{
		{name: "list", what: "list the endpoints, by id, without their secrets", setup: webhooksList},
		{name: "get", args: "ID", what: "read an endpoint", setup: webhooksGet},
		{name: "failures", args: "ID", what: "list the events an endpoint was not delivered, in feed order", setup: webhooksFailures},
		{name: "enable", args: "ID", what: "enable an endpoint again (PATCH disabled=false): its deliveries resume where they stopped", setup: webhooksSetDisabled(false)},
		{name: "disable", args: "ID", what: "disable an endpoint (PATCH disabled=true, reason manual): it gets nothing until enabled", setup: webhooksSetDisabled(true)},
		{name: "create", what: "register an endpoint: its secret is printed this once", setup: webhooksCreate},
		{name: "delete", args: "ID", what: "delete an endpoint and its failed deliveries", setup: webhooksDelete},
	}
}

func webhooksList(*envFlags) runFunc {
	return func(ctx context.Context, x *cli, _ []string) error {
		ws, err := collect(x.api.ListWebhooks(ctx, sgclient.ListWebhooksParams{Limit: 100}))
		if err != nil {
			return err
		}
		return x.print(ws, webhookHeader, webhookRows(ws...)...)
	}
}

func webhooksGet(*envFlags) runFunc {
	return func(ctx context.Context, x *cli, args []string) error {
		w, err := x.api.GetWebhook(ctx, args[0])
		return x.webhookOrErr(w, err)
	}
}

func webhooksSetDisabled(disabled bool) func(*envFlags) runFunc {
	return func(*envFlags) runFunc {
		return func(ctx context.Context, x *cli, args []string) error {
			w, err := x.api.UpdateWebhook(ctx, args[0], sgclient.WebhookUpdate{Disabled: disabled})
			return x.webhookOrErr(w, err)
		}
	}
}

func webhooksFailures(*envFlags) runFunc {
	return func(ctx context.Context, x *cli, args []string) error {
		fs, err := collect(x.api.ListWebhookFailures(ctx, args[0], sgclient.ListWebhookFailuresParams{Limit: 100}))
		if err != nil {
			return err
		}
		rows := make([][]string, len(fs))
		for i, f := range fs {
			rows[i] = []string{f.EventID, strconv.Itoa(f.Attempts), timeText(f.FirstAttemptAt), timeText(f.FailedAt), oneLine(f.LastError)}
		}
		return x.print(fs, []string{"EVENT", "ATTEMPTS", "FIRST ATTEMPT", "FAILED", "LAST ERROR"}, rows...)
	}
}

func webhooksCreate(e *envFlags) runFunc {
	var req sgclient.WebhookRequest
	e.fs.StringVar(&req.URL, "endpoint", "", "the endpoint's absolute http(s) URL (required)")
	e.fs.StringVar(&req.Secret, "secret", "", "its signing secret, whsec_ and the base64 of 24 to 64 bytes (left out: made by the service)")
	return func(ctx context.Context, x *cli, _ []string) error {
		w, err := x.api.CreateWebhook(ctx, req)
		if err != nil {
			return err
		}
		return x.print(w, []string{"ID", "URL", "SECRET (SHOWN ONCE)", "CREATED"}, []string{w.ID, w.URL, w.Secret, timeText(w.CreatedAt)})
	}
}

func webhooksDelete(*envFlags) runFunc {
	return func(ctx context.Context, x *cli, args []string) error {
		if err := x.api.DeleteWebhook(ctx, args[0]); err != nil {
			return err
		}
		return x.print(map[string]string{"deleted": args[0]}, []string{"DELETED"}, []string{args[0]})
	}
}

func (x *cli) webhookOrErr(w *sgclient.Webhook, err error) error {
	if err != nil {
		return err
	}
	return x.print(w, webhookHeader, webhookRows(*w)...)
}

var webhookHeader = []string{"ID", "URL", "DISABLED", "REASON", "DISABLED AT", "CREATED"}

func webhookRows(ws ...sgclient.Webhook) [][]string {
	rows := make([][]string, len(ws))
	for i, w := range ws {
		rows[i] = []string{w.ID, w.URL, strconv.FormatBool(w.Disabled), cmp.Or(w.DisabledReason, "-"), timeText(w.DisabledAt), timeText(w.CreatedAt)}
	}
	return rows
}
