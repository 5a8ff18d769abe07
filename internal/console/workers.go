package console

import (
	"net/http"
	"strconv"

	"github.com/ax-run/ax/task"
)

// WorkerRow is an executor on the Workers page: its announcement in the
// workers registry and its load as a share of its capacity.
type WorkerRow struct {
	task.Worker
	// LoadPct is InFlight as a percentage of Capacity (0–100).
	LoadPct int
}

func workerRows(ws []task.Worker) []WorkerRow {
	out := make([]WorkerRow, len(ws))
	for i, w := range ws {
		pct := 0
		if w.Capacity > 0 {
			pct = min(100, int(100*w.InFlight/w.Capacity+0.5))
		}
		out[i] = WorkerRow{Worker: w, LoadPct: pct}
	}
	return out
}

// handleWorkers is the Workers page: every executor in the registry, idle
// ones too, and what runs on each now (refreshed live: ?part=live).
func (s *Server) handleWorkers(w http.ResponseWriter, r *http.Request, v *visit) {
	ws, err := s.c.Workers(r.Context())
	if err != nil {
		s.fail(w, r, v, http.StatusBadGateway, "Workers registry unavailable", err.Error())
		return
	}
	running := 0
	for _, x := range ws {
		running += x.RunningTotal
	}
	data := map[string]any{"Title": "Workers", "Workers": workerRows(ws), "Running": running, "Now": s.now()}
	switch part := r.URL.Query().Get("part"); part {
	case "":
		s.render(w, r, v, http.StatusOK, "workers", data)
	case "live":
		s.renderPart(w, r, v, "workers", part, data)
	default:
		s.fail(w, r, v, http.StatusBadRequest, "Bad request", "There is no part "+strconv.Quote(part)+" of the workers page.")
	}
}
