// Command metricnames prints the name of every series the controller's
// /metrics can show, one a line (controller.MetricNames): the list that
// tools/monitoring checks the dashboard's and the alert rules' queries
// against, read from the controller's registry rather than kept by hand.
package main

import (
	"fmt"

	"github.com/gpu-steward/steward/controller"
)

func main() {
	for _, name := range controller.MetricNames() {
		fmt.Println(name)
	}
}
