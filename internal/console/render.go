package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// pages holds one template set per page: the layout plus the page.
type pages struct {
	byName map[string]*template.Template
}

var funcs = template.FuncMap{
	"ts": func(t any) string {
		switch v := t.(type) {
		case time.Time:
			if v.IsZero() {
				return ""
			}
			return v.UTC().Format("2006-01-02 15:04:05.000")
		case *time.Time:
			if v == nil || v.IsZero() {
				return ""
			}
			return v.UTC().Format("2006-01-02 15:04:05.000")
		}
		return ""
	},
	"dur": func(d time.Duration) string {
		switch {
		case d <= 0:
			return "0s"
		case d < time.Second:
			return d.Round(time.Millisecond).String()
		case d < time.Minute:
			return d.Round(100 * time.Millisecond).String()
		}
		return d.Round(time.Second).String()
	},
	"taskURL": func(id string) string { return "/task/" + escapeID(id) },
	"json": func(v any) (template.JS, error) {
		b, err := json.Marshal(v)
		return template.JS(b), err
	},
	"short": func(s string, n int) string {
		if len(s) <= n {
			return s
		}
		return s[:n] + "…"
	},
	"query": func(kv ...string) template.URL {
		q := url.Values{}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] != "" {
				q.Set(kv[i], kv[i+1])
			}
		}
		return template.URL(q.Encode())
	},
	"add":  func(a, b int) int { return a + b },
	"pctf": func(f float64) float64 { return 100 * f },
	"pct": func(a, b int) int {
		if b == 0 {
			return 0
		}
		return a * 100 / b
	},
}

// escapeID escapes a task id for a URL path, keeping its slashes readable.
func escapeID(id string) string {
	parts := strings.Split(id, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

func loadPages() (*pages, error) {
	names, err := fs.Glob(assets, "templates/*.html")
	if err != nil {
		return nil, err
	}
	p := &pages{byName: map[string]*template.Template{}}
	for _, n := range names {
		base := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if base == "layout" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(assets, "templates/layout.html", n)
		if err != nil {
			return nil, fmt.Errorf("console template %s: %w", n, err)
		}
		p.byName[base] = t
	}
	return p, nil
}

// view is what every page template gets.
type view struct {
	Page   string
	Title  string
	V      *visit
	Data   any
	Mirror string
	Path   string
}

// render writes a page; a template error becomes a plain 500.
func (s *Server) render(w http.ResponseWriter, r *http.Request, v *visit, status int, page string, data any) {
	t, ok := s.pages.byName[page]
	if !ok {
		http.Error(w, "no template "+page, http.StatusInternalServerError)
		return
	}
	title := page
	if m, ok := data.(map[string]any); ok {
		if tt, ok := m["Title"].(string); ok {
			title = tt
		}
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, view{Page: page, Title: title, V: v, Data: data, Mirror: s.cfg.MirrorInfo, Path: r.URL.Path}); err != nil {
		s.log.Error().Err(err).Str("page", page).Msg("render console page")
		http.Error(w, "render "+page+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// renderPart writes one named template of a page (a live fragment).
func (s *Server) renderPart(w http.ResponseWriter, r *http.Request, v *visit, page, part string, data any) {
	t, ok := s.pages.byName[page]
	if !ok {
		http.Error(w, "no template "+page, http.StatusInternalServerError)
		return
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, part, view{Page: page, V: v, Data: data, Mirror: s.cfg.MirrorInfo, Path: r.URL.Path}); err != nil {
		http.Error(w, "render "+part+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(buf.Bytes())
}

// fail renders the error page.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, v *visit, status int, title, msg string) {
	if status >= 500 {
		s.log.Warn().Str("path", r.URL.Path).Int("status", status).Msg(msg)
	}
	s.render(w, r, v, status, "error", map[string]any{"Title": title, "Status": status, "StatusText": http.StatusText(status), "Message": msg})
}

// writeJSON answers an API request.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
