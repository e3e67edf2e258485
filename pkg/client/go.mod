module github.com/stockguard/stockguard/pkg/client

go 1.26.0
