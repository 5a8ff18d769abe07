package metrics

import "github.com/prometheus/client_golang/prometheus"

// ExecutorRunning is ax_executor_running_tasks{capability}: the attempts an
// executor runs now, by capability.
func ExecutorRunning(reg prometheus.Registerer) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ax_executor_running_tasks",
		Help: "Attempts this executor runs now, by capability."}, []string{"capability"})
	register(reg, g)
	return g
}

// RegisterExecutorInfo registers an executor's capacity
// (ax_executor_capacity) and one ax_executor_serving{capability} = 1 per
// capability it serves: count them for the executors online.
func RegisterExecutorInfo(reg prometheus.Registerer, capacity float64, capabilities []string) {
	register(reg, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ax_executor_capacity",
		Help: "This executor's capacity in estimated_cost units."}, func() float64 { return capacity }))
	serving := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ax_executor_serving",
		Help: "1 for each capability this executor serves (sum by capability: executors online)."}, []string{"capability"})
	register(reg, serving)
	for _, c := range capabilities {
		serving.WithLabelValues(c).Set(1)
	}
}
