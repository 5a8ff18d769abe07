package cli

import (
	"fmt"

	"github.com/ax-run/ax/internal/plan"
)

// planAutoscaling is the KEDA thresholds of a plan, named as the Helm
// chart's values (deploy/helm/ax: executors[].autoscaling).
type planAutoscaling struct {
	BacklogPerReplica float64 `json:"backlog_per_replica"`
	InHandPerReplica  float64 `json:"in_hand_per_replica"`
	OldestSeconds     float64 `json:"oldest_seconds"`
	MinReplicas       int     `json:"min_replicas"`
	MaxReplicas       int     `json:"max_replicas"`
}

func autoscalingOf(p plan.Plan) planAutoscaling {
	a := p.Autoscaling()
	return planAutoscaling{a.BacklogPerReplica, a.InHandPerReplica, a.OldestSeconds, a.MinReplicas, a.MaxReplicas}
}

func printAutoscaling(g *globals, a planAutoscaling) {
	w := g.stdout
	fmt.Fprintln(w, "Autoscaling on backlog (KEDA; Helm chart deploy/helm/ax, values executors[].autoscaling):")
	fmt.Fprintf(w, "  backlogPerReplica  %-8.0f ax_backlog_tasks one executor drains within T_wait (slots / T_exec × T_wait)\n", a.BacklogPerReplica)
	fmt.Fprintf(w, "  inHandPerReplica   %-8.4g ax_dispatches_in_hand one executor holds (its slots): executors running tasks stay\n", a.InHandPerReplica)
	fmt.Fprintf(w, "  oldestSeconds      %-8.4g ax_backlog_oldest_seconds that adds executors (T_wait)\n", a.OldestSeconds)
	fmt.Fprintf(w, "  minReplicas        %-8d scale to zero when nothing is queued or running\n", a.MinReplicas)
	fmt.Fprintf(w, "  maxReplicas        %-8d the executors with the largest margin\n", a.MaxReplicas)
}
