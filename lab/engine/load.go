package engine

import "net/http"

// getLoad serves SGLang's GET /get_load: one object per data-parallel rank
// (the lab runs one), num_reqs the scheduler's running batch plus its
// waiting queue and num_waiting_reqs the queue alone, as SGLang's
// scheduler get_load counts them; num_tokens is not simulated (0).
func (e *Engine) getLoad(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	running, waiting := e.st.active, len(e.waiting)
	e.mu.Unlock()
	writeJSON(w, http.StatusOK, []map[string]any{{
		"dp_rank": 0, "num_reqs": running + waiting, "num_waiting_reqs": waiting, "num_tokens": 0,
	}})
}
