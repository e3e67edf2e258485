package gormstore

import (
	"strings"
	"sync"
	"testing"

	"gorm.io/gorm/schema"
)

// TestInsertColumns: createAll inserts every column of each table GORM knows
// of (but an autoincrement id, which the database numbers), one value per
// column: a column added to a model and not to its columns() is caught here.
func TestInsertColumns(t *testing.T) {
	for _, r := range []row{orderRow{}, lineRow{}, ledgerRow{}, idempotencyRow{}, holdRow{}, holdLineRow{}} {
		s, err := schema.Parse(r, &sync.Map{}, schema.NamingStrategy{})
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, f := range s.Fields {
			if f.DBName != "" && !f.AutoIncrement {
				want = append(want, f.DBName)
			}
		}
		got := strings.Split(strings.Trim(r.columns(), "()"), ", ")
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: columns %v, the model's %v", r.TableName(), got, want)
		}
		if n := len(r.values()); n != len(want) {
			t.Errorf("%s: %d values for %d columns", r.TableName(), n, len(want))
		}
	}
}
