package gormstore

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"

	"gorm.io/gorm"
)

// CountTransactions makes db count the transactions that Store.tx begins (every
// write's) in n. It may wrap CountStatements' pool, or be wrapped by it.
func CountTransactions(db *gorm.DB, n *atomic.Int64) error {
	var begin func(context.Context, *sql.TxOptions) (gorm.ConnPool, error)
	switch b := db.Statement.ConnPool.(type) {
	case gorm.TxBeginner:
		begin = func(ctx context.Context, opts *sql.TxOptions) (gorm.ConnPool, error) {
			tx, err := b.BeginTx(ctx, opts)
			if err != nil {
				return nil, err
			}
			return tx, nil
		}
	case gorm.ConnPoolBeginner:
		begin = b.BeginTx
	default:
		return fmt.Errorf("the pool %T begins no transaction", db.Statement.ConnPool)
	}
	db.Statement.ConnPool = txCountingPool{ConnPool: db.Statement.ConnPool, begin: begin, n: n}
	return nil
}

// txCountingPool counts the transactions it begins.
type txCountingPool struct {
	gorm.ConnPool
	begin func(context.Context, *sql.TxOptions) (gorm.ConnPool, error)
	n     *atomic.Int64
}

func (p txCountingPool) BeginTx(ctx context.Context, opts *sql.TxOptions) (gorm.ConnPool, error) {
	p.n.Add(1)
	return p.begin(ctx, opts)
}
