package httpapi

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
)

// routeMetrics are one route's HTTP metrics, looked up once each instead of
// per request (WithLabelValues hashes the labels and takes the vector's lock
// every time): its duration's observer and its counter per status. Each is
// made at its first use, as WithLabelValues made it, so that /metrics shows
// the series it showed.
type routeMetrics struct {
	s             *server
	method, route string

	duration atomic.Pointer[prometheus.Observer]
	mu       sync.Mutex                      // held to add a status to counters
	counters atomic.Pointer[[]statusCounter] // copied on write
}

type statusCounter struct {
	status  int
	counter prometheus.Counter
}

// observe counts one answer of the route with status and its duration.
func (m *routeMetrics) observe(status int, seconds float64) {
	m.counter(status).Inc()
	d := m.duration.Load()
	if d == nil {
		o := m.s.duration.WithLabelValues(m.route)
		m.duration.Store(&o)
		d = &o
	}
	(*d).Observe(seconds)
}

// counter is the route's counter of status.
func (m *routeMetrics) counter(status int) prometheus.Counter {
	if cs := m.counters.Load(); cs != nil {
		for _, c := range *cs {
			if c.status == status {
				return c.counter
			}
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var cs []statusCounter
	if p := m.counters.Load(); p != nil {
		cs = *p
	}
	for _, c := range cs {
		if c.status == status {
			return c.counter
		}
	}
	c := m.s.requests.WithLabelValues(m.route, m.method, strconv.Itoa(status))
	grown := make([]statusCounter, len(cs), len(cs)+1) // a copy: readers hold the old one
	copy(grown, cs)
	grown = append(grown, statusCounter{status, c})
	m.counters.Store(&grown)
	return c
}

// routeMetrics makes the metrics of a route and the handler that names them
// to its requests' context, for observe.
func (s *server) routeMetrics(method, route string) gin.HandlerFunc {
	m := &routeMetrics{s: s, method: method, route: route}
	return func(c *gin.Context) {
		if rc, ok := c.Request.Context().(*reqContext); ok {
			rc.metrics = m
		}
	}
}
