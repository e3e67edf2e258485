//go:build !race

package httpapi_test

// raceBuild says whether the test binary has the race detector.
const raceBuild = false
