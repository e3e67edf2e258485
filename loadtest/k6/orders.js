// The plain order workload of stockguard's loadtest, for k6: one hot SKU (or
// SKUS of them, uniform), quantity 1, an Idempotency-Key per order, no retries,
// no cancels, a closed loop of VUS VUs. setup() seeds the SKUs through the admin
// restock route; each iteration places one order and checks it is a 201 (placed)
// or a 409 (out of stock). See README.md beside this file.
//
//   k6 run -e BASE_URL=http://127.0.0.1:8080 -e ADMIN_TOKEN=secret loadtest/k6/orders.js
import http from 'k6/http';
import { check, fail } from 'k6';
import { Counter } from 'k6/metrics';

const BASE_URL = (__ENV.BASE_URL || 'http://127.0.0.1:8080').replace(/\/+$/, '');
const ADMIN_TOKEN = __ENV.ADMIN_TOKEN || __ENV.STOCKGUARD_ADMIN_TOKEN || '';
// The orders' credential: a client's API key (orders:write), else the admin token.
const API_KEY = __ENV.API_KEY || __ENV.STOCKGUARD_API_KEY || ADMIN_TOKEN;
// A fresh SKU name per run by default: an SKU with stock left from another run
// would count that stock as this run's.
const SKU = __ENV.SKU || `k6-${Date.now().toString(36)}`;
const SKUS = parseInt(__ENV.SKUS || '1', 10);
const STOCK = parseInt(__ENV.STOCK || '100', 10);

export const options = {
  scenarios: {
    orders: {
      executor: 'constant-vus',
      vus: parseInt(__ENV.VUS || '64', 10),
      duration: __ENV.DURATION || '10s',
    },
  },
  // The figures loadtest's -summary-json has: p(99) is not in k6's default list.
  summaryTrendStats: ['avg', 'min', 'med', 'max', 'p(90)', 'p(95)', 'p(99)'],
};

const accepted = new Counter('orders_accepted');
const refused = new Counter('orders_refused');

function skuName(i) {
  return SKUS === 1 ? SKU : `${SKU}-${i}`;
}

export function setup() {
  if (!ADMIN_TOKEN) {
    fail('ADMIN_TOKEN is required to seed the stock');
  }
  const skus = [];
  for (let i = 0; i < SKUS; i++) {
    const sku = skuName(i);
    const res = http.post(`${BASE_URL}/v1/skus/${encodeURIComponent(sku)}/restock`,
      JSON.stringify({ quantity: STOCK }),
      { headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${ADMIN_TOKEN}` } });
    if (res.status !== 200 && res.status !== 201) { // 201: the SKU was created
      fail(`restock ${sku}: status ${res.status} ${res.body}`);
    }
    skus.push(sku);
  }
  return { skus };
}

// key is 24 hex digits, as loadtest's: unique enough for a run, cheap to make.
function key() {
  let s = '';
  for (let i = 0; i < 3; i++) {
    s += Math.floor(Math.random() * 0x100000000).toString(16).padStart(8, '0');
  }
  return s;
}

export default function (data) {
  const sku = data.skus[data.skus.length === 1 ? 0 : Math.floor(Math.random() * data.skus.length)];
  const res = http.post(`${BASE_URL}/v1/orders`, JSON.stringify({ items: [{ sku, quantity: 1 }] }),
    { headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key(), Authorization: `Bearer ${API_KEY}` },
      responseCallback: http.expectedStatuses(201, 409) });
  check(res, { 'order: 201 or 409': (r) => r.status === 201 || r.status === 409 });
  if (res.status === 201) {
    accepted.add(1);
  } else if (res.status === 409) {
    refused.add(1);
  }
}
