package main

import (
	"context"
	"strconv"

	sgclient "github.com/stockguard/stockguard/pkg/client"
)

// locations: where stock is kept (docs/locations.md).

func locationsSubs() []subcommand {
	return []subcommand{
		{name: "list", what: "list the locations, by priority then id", setup: locationsList},
		{name: "get", args: "ID", what: "read a location", setup: locationsGet},
		{name: "create", what: "create a location", setup: locationsCreate},
		{name: "update", args: "ID", what: "change a location's name, priority or state: the flags given", setup: locationsUpdate},
	}
}

func locationsList(*envFlags) runFunc {
	return func(ctx context.Context, x *cli, _ []string) error {
		ls, err := collect(x.api.ListLocations(ctx))
		if err != nil {
			return err
		}
		return x.print(ls, locationHeader, locationRows(ls...)...)
	}
}

func locationsGet(*envFlags) runFunc {
	return func(ctx context.Context, x *cli, args []string) error {
		l, err := x.api.GetLocation(ctx, args[0])
		return x.locationOrErr(l, err)
	}
}

func locationsCreate(e *envFlags) runFunc {
	var req sgclient.LocationRequest
	var inactive bool
	e.fs.StringVar(&req.ID, "id", "", "the location's id, ^[a-z0-9][a-z0-9._-]{0,63}$ (required)")
	e.fs.StringVar(&req.Name, "name", "", "its name, 1 to 200 characters (required)")
	e.fs.Int64Var(&req.Priority, "priority", 0, "allocation by priority takes the lowest first")
	e.fs.BoolVar(&inactive, "inactive", false, "create it inactive: it allocates nothing until updated with --active")
	return func(ctx context.Context, x *cli, _ []string) error {
		if inactive {
			active := false
			req.Active = &active
		}
		l, err := x.api.CreateLocation(ctx, req)
		return x.locationOrErr(l, err)
	}
}

func locationsUpdate(e *envFlags) runFunc {
	var name string
	var priority int64
	var active bool
	e.fs.StringVar(&name, "name", "", "its new name")
	e.fs.Int64Var(&priority, "priority", 0, "its new priority")
	e.fs.BoolVar(&active, "active", true, "--active=false deactivates it (never the default location), --active activates it")
	return func(ctx context.Context, x *cli, args []string) error {
		var p sgclient.LocationPatch
		set := e.set()
		if set["name"] {
			p.Name = &name
		}
		if set["priority"] {
			p.Priority = &priority
		}
		if set["active"] {
			p.Active = &active
		}
		l, err := x.api.UpdateLocation(ctx, args[0], p)
		return x.locationOrErr(l, err)
	}
}

func (x *cli) locationOrErr(l *sgclient.Location, err error) error {
	if err != nil {
		return err
	}
	return x.print(l, locationHeader, locationRows(*l)...)
}

var locationHeader = []string{"ID", "NAME", "PRIORITY", "ACTIVE", "CREATED"}

func locationRows(ls ...sgclient.Location) [][]string {
	rows := make([][]string, len(ls))
	for i, l := range ls {
		rows[i] = []string{l.ID, l.Name, strconv.FormatInt(l.Priority, 10), strconv.FormatBool(l.Active), timeText(l.CreatedAt)}
	}
	return rows
}
