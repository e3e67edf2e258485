package gormstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/orders"
)

// Clients and their API keys. A key is stored as the hash of its secret; the
// authenticator reads a key with its client's scopes and limits in one
// statement (Callers), by the hash's unique index.

type clientRow struct {
	ID                 string    `gorm:"column:id;primaryKey;size:40"`
	Name               string    `gorm:"column:name;size:200;not null"`
	Scopes             string    `gorm:"column:scopes;size:400;not null"` // space-separated
	MaxUnitsHeldPerSKU int64     `gorm:"column:max_units_held_per_sku;not null"`
	RatePerSecond      float64   `gorm:"column:rate_per_second;not null"`
	RateBurst          int       `gorm:"column:rate_burst;not null"`
	CreatedAt          time.Time `gorm:"column:created_at;not null"`
	UpdatedAt          time.Time `gorm:"column:updated_at;not null"`
}

func (clientRow) TableName() string { return "clients" }

func (r clientRow) client() orders.Client {
	return orders.Client{ID: r.ID, Name: r.Name, Scopes: scopesOf(r.Scopes), MaxUnitsHeldPerSKU: r.MaxUnitsHeldPerSKU,
		RateLimit: orders.RateLimit{PerSecond: r.RatePerSecond, Burst: r.RateBurst}, CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC()}
}

func scopesOf(s string) []orders.Scope {
	out := []orders.Scope{}
	for _, f := range strings.Fields(s) {
		out = append(out, orders.Scope(f))
	}
	return out
}

func scopesText(scopes []orders.Scope) string {
	parts := make([]string, len(scopes))
	for i, s := range scopes {
		parts[i] = string(s)
	}
	return strings.Join(parts, " ")
}

type apiKeyRow struct {
	ID        string     `gorm:"column:id;primaryKey;size:40"`
	ClientID  string     `gorm:"column:client_id;size:40;not null;index:idx_api_keys_client_id"`
	Hash      string     `gorm:"column:secret_hash;size:64;not null;uniqueIndex:idx_api_keys_secret_hash"`
	Hint      string     `gorm:"column:hint;size:16;not null"`
	CreatedAt time.Time  `gorm:"column:created_at;not null"`
	RevokedAt *time.Time `gorm:"column:revoked_at"`
}

func (apiKeyRow) TableName() string { return "api_keys" }

func (r apiKeyRow) key() orders.APIKey {
	k := orders.APIKey{ID: r.ID, ClientID: r.ClientID, Hint: r.Hint, CreatedAt: r.CreatedAt.UTC()}
	if r.RevokedAt != nil {
		at := r.RevokedAt.UTC()
		k.RevokedAt = &at
	}
	return k
}

// migrateV7 adds the clients and their keys, and the owner (client) and
// customer of every order and hold: "" for those made before, which only the
// admin lists.
func migrateV7(tx *gorm.DB) error {
	m := binTables(tx).Migrator()
	steps := []func() error{
		func() error { return m.CreateTable(&clientRow{}, &apiKeyRow{}) },
		func() error { return m.AddColumn(&orderRow{}, "ClientID") },
		func() error { return m.AddColumn(&orderRow{}, "Customer") },
		func() error { return m.CreateIndex(&orderRow{}, "idx_orders_client_id") },
		func() error { return m.AddColumn(&holdRow{}, "ClientID") },
		func() error { return m.AddColumn(&holdRow{}, "Customer") },
		func() error { return m.CreateIndex(&holdRow{}, "idx_reservations_client_id") },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("step %d: %w", i+1, err)
		}
	}
	return nil
}

var _ orders.ClientStore = (*Store)(nil)

// CreateClient stores a new client.
func (s *Store) CreateClient(ctx context.Context, c orders.Client) (orders.Client, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	row := clientRow{ID: c.ID, Name: c.Name, Scopes: scopesText(c.Scopes), MaxUnitsHeldPerSKU: c.MaxUnitsHeldPerSKU,
		RatePerSecond: c.RateLimit.PerSecond, RateBurst: c.RateLimit.Burst, CreatedAt: stamp(c.CreatedAt), UpdatedAt: stamp(c.UpdatedAt)}
	if err := db.Create(&row).Error; err != nil {
		return orders.Client{}, unavailable("create client", err)
	}
	return row.client(), nil
}

// Client reads one client.
func (s *Store) Client(ctx context.Context, id string) (orders.Client, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	var row clientRow
	if err := db.Where("id = ?", id).Take(&row).Error; err != nil {
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return orders.Client{}, fmt.Errorf("client %s: %w", id, orders.ErrNotFound)
		}
		return orders.Client{}, unavailable("client", err)
	}
	return row.client(), nil
}

// Clients lists up to limit clients after the id after, by id.
func (s *Store) Clients(ctx context.Context, after string, limit int) ([]orders.Client, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	var rows []clientRow
	if err := db.Where("id > ?", after).Order("id").Limit(limit).Find(&rows).Error; err != nil {
		return nil, unavailable("list clients", err)
	}
	out := make([]orders.Client, len(rows))
	for i, r := range rows {
		out[i] = r.client()
	}
	return out, nil
}

// UpdateClient changes the fields of p that are set.
func (s *Store) UpdateClient(ctx context.Context, id string, p orders.ClientPatch, at time.Time) (orders.Client, error) {
	set := map[string]any{"updated_at": stamp(at)}
	if p.Name != nil {
		set["name"] = *p.Name
	}
	if p.Scopes != nil {
		set["scopes"] = scopesText(p.Scopes)
	}
	if p.MaxUnitsHeldPerSKU != nil {
		set["max_units_held_per_sku"] = *p.MaxUnitsHeldPerSKU
	}
	if p.RateLimit != nil {
		set["rate_per_second"], set["rate_burst"] = p.RateLimit.PerSecond, p.RateLimit.Burst
	}
	var row clientRow
	err := s.tx(ctx, func(tx *gorm.DB) error {
		res := tx.Model(&clientRow{}).Where("id = ?", id).Updates(set)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return orders.ErrNotFound
		}
		return tx.Where("id = ?", id).Take(&row).Error
	})
	if errors.Is(err, orders.ErrNotFound) {
		return orders.Client{}, fmt.Errorf("client %s: %w", id, err)
	}
	if err != nil {
		return orders.Client{}, unavailable("update client", err)
	}
	return row.client(), nil
}

// CreateKey stores a new key (its hash, never its secret).
func (s *Store) CreateKey(ctx context.Context, k orders.APIKey) (orders.APIKey, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	row := apiKeyRow{ID: k.ID, ClientID: k.ClientID, Hash: k.Hash, Hint: k.Hint, CreatedAt: stamp(k.CreatedAt)}
	if err := db.Create(&row).Error; err != nil {
		return orders.APIKey{}, unavailable("create key", err)
	}
	return row.key(), nil
}

// Keys lists up to limit keys of a client after the id after, by id.
func (s *Store) Keys(ctx context.Context, clientID, after string, limit int) ([]orders.APIKey, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	var rows []apiKeyRow
	if err := db.Where("client_id = ? AND id > ?", clientID, after).Order("id").Limit(limit).Find(&rows).Error; err != nil {
		return nil, unavailable("list keys", err)
	}
	out := make([]orders.APIKey, len(rows))
	for i, r := range rows {
		out[i] = r.key()
	}
	return out, nil
}

// RevokeKey marks a live key of the client revoked.
func (s *Store) RevokeKey(ctx context.Context, clientID, keyID string, at time.Time) error {
	db, cancel := s.conn(ctx)
	defer cancel()
	res := db.Model(&apiKeyRow{}).Where("id = ? AND client_id = ? AND revoked_at IS NULL", keyID, clientID).Update("revoked_at", stamp(at))
	if res.Error != nil {
		return unavailable("revoke key", res.Error)
	}
	if res.RowsAffected == 0 {
		return fmt.Errorf("key %s: %w", keyID, orders.ErrNotFound)
	}
	return nil
}

// callersChunk bounds the hashes of one read.
const callersChunk = 500

// Callers reads the live keys of hashes with their clients.
func (s *Store) Callers(ctx context.Context, hashes []string) (map[string]orders.Caller, error) {
	out := make(map[string]orders.Caller, len(hashes))
	db, cancel := s.conn(ctx)
	defer cancel()
	for start := 0; start < len(hashes); start += callersChunk {
		chunk := hashes[start:min(start+callersChunk, len(hashes))]
		rows, err := db.Raw(`SELECT k.secret_hash, k.id, c.id, c.scopes, c.max_units_held_per_sku, c.rate_per_second, c.rate_burst
FROM api_keys k JOIN clients c ON c.id = k.client_id WHERE k.secret_hash IN ? AND k.revoked_at IS NULL`, chunk).Rows()
		if err != nil {
			return nil, unavailable("keys", err)
		}
		for rows.Next() {
			var h, scopes string
			var c orders.Caller
			if err := rows.Scan(&h, &c.KeyID, &c.ClientID, &scopes, &c.MaxUnitsHeldPerSKU, &c.RateLimit.PerSecond, &c.RateLimit.Burst); err != nil {
				_ = rows.Close()
				return nil, unavailable("keys", err)
			}
			c.Scopes = scopesOf(scopes)
			out[h] = c
		}
		err = rows.Err()
		_ = rows.Close()
		if err != nil {
			return nil, unavailable("keys", err)
		}
	}
	return out, nil
}
