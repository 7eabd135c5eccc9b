// Command echo-server is the kind suite's traffic target (e2e/traffic_test.go): an HTTP server
// on :8080 that answers every request with "echo-server <pod name>" ($POD_NAME), run in a pod
// behind a Service that uses a reserved address.
package main

import (
	"fmt"
	"log"
	"net/http"
	"os"
)

func main() {
	name := os.Getenv("POD_NAME")
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "echo-server %s\n", name)
	})
	log.Fatal(http.ListenAndServe(":8080", nil))
}
