// Package console is AX's web console: the Admin role of the design notes.
// Operators see, search, explain and fix tasks in a browser.
//
// Pages are rendered on the server with html/template; a little
// JavaScript refreshes the overview and draws charts (uPlot) and the DAG
// around a task (dagre). Every asset is embedded, so the ax binary serves
// the console with nothing else installed.
//
// # Data
//
// The console reads through the SDK (JetStream is the source of truth:
// task records and histories, dead letters, rejections, schedules, gates)
// and, when it is given the MySQL mirror, through the audit package for
// searches and counts over every task. Without the mirror, search covers
// the newest events of AX_TASKS (Config.RecentEvents).
//
// The overview costs the servers a fixed number of requests per refresh,
// whatever the number of tasks: stream and consumer infos, one message
// read per non-empty ready subject, the control bucket, and (with the
// mirror) three indexed queries, cached for Config.OverviewTTL so any
// number of open browsers share one computation. Throughput per type and
// the executors online come from a watcher that follows AX_TASKS.
//
// # Access
//
// Read-only by default. Actions (cancel, re-drive, force re-run, pause and
// resume, schedule pause, resume and trigger) need a logged-in operator
// (Credential with RoleOperator), a confirmation, and a CSRF token bound to
// the browser; each is carried out by the same SDK commands as the CLI,
// with the operator's name in the reason, and recorded as an audit event
// of kind "operator" naming the operator as its actor.
package console

import (
	"context"
	"embed"
	"errors"
	"io/fs"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-run/ax/internal/audit"
	"github.com/ax-run/ax/sdk"
)

// Defaults of Config.
const (
	DefaultRecentEvents = 5000
	DefaultOverviewTTL  = 2 * time.Second
	DefaultSessionTTL   = 12 * time.Hour
	// DefaultWatchEvents is how many of the newest events the watcher
	// replays at start (besides the last DefaultWatchWindow).
	DefaultWatchEvents = 20000
	DefaultWatchWindow = 30 * time.Minute
)

//go:embed templates static
var assets embed.FS

// Config configures a console Server.
type Config struct {
	// Client reads and commands AX. Required.
	Client *sdk.Client
	// Auditor queries the MySQL mirror; nil serves everything from
	// JetStream (search then covers the newest RecentEvents events).
	Auditor *audit.Auditor
	// MirrorInfo describes the mirror in the page footer (never a
	// password); empty without one.
	MirrorInfo string
	// Credentials are the users who can log in. Without any, the console
	// is read-only for everybody.
	Credentials []Credential
	// RequireLogin makes every page need a logged-in user (viewer or
	// operator); by default anybody who reaches the console may look.
	RequireLogin bool
	// RecentEvents bounds the events a JetStream-only search reads.
	// Default DefaultRecentEvents.
	RecentEvents int
	// OverviewTTL is how long an overview is reused. Default DefaultOverviewTTL.
	OverviewTTL time.Duration
	// SessionTTL is how long a login lasts. Default DefaultSessionTTL.
	SessionTTL time.Duration
	// WatchEvents and WatchWindow bound the history the watcher replays at
	// start. Defaults DefaultWatchEvents and DefaultWatchWindow.
	WatchEvents int
	WatchWindow time.Duration
	// Logger logs failures; nil logs nothing.
	Logger *zerolog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Server is the web console. Create it with New, call Start to follow
// AX_TASKS, serve Handler, and Stop it when done.
type Server struct {
	cfg   Config
	c     *sdk.Client
	js    jetstream.JetStream
	log   zerolog.Logger
	auth  *authenticator
	pages *pages
	mux   *http.ServeMux
	watch *watcher

	ovMu  sync.Mutex
	ov    *Overview
	ovErr error

	myMu   sync.Mutex
	my     mirrorStats
	myBusy bool
	// bg owns the background reads of the mirror's statistics.
	bg sync.WaitGroup

	runMu  sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a console for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Client == nil {
		return nil, errors.New("console: Config.Client is required")
	}
	if cfg.RecentEvents <= 0 {
		cfg.RecentEvents = DefaultRecentEvents
	}
	if cfg.OverviewTTL <= 0 {
		cfg.OverviewTTL = DefaultOverviewTTL
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.WatchEvents <= 0 {
		cfg.WatchEvents = DefaultWatchEvents
	}
	if cfg.WatchWindow <= 0 {
		cfg.WatchWindow = DefaultWatchWindow
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := zerolog.Nop()
	if cfg.Logger != nil {
		log = *cfg.Logger
	}
	js, err := jetstream.New(cfg.Client.Conn())
	if err != nil {
		return nil, err
	}
	auth, err := newAuthenticator(cfg.Credentials, cfg.SessionTTL, cfg.Now)
	if err != nil {
		return nil, err
	}
	p, err := loadPages()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, c: cfg.Client, js: js, log: log, auth: auth, pages: p}
	s.watch = newWatcher(js, cfg.Now, cfg.WatchEvents, cfg.WatchWindow, log)
	s.routes()
	return s, nil
}

// Start follows AX_TASKS for the live charts and the executors online. It
// does not block; Stop ends it.
func (s *Server) Start(ctx context.Context) error {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	if s.cancel != nil {
		return nil
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if err := s.watch.open(ctx); err != nil {
		cancel()
		return err
	}
	s.cancel, s.done = cancel, make(chan struct{})
	go func() {
		defer close(s.done)
		s.watch.run(ctx)
	}()
	return nil
}

// Stop ends the watcher and waits for background reads; it is
// idempotent. Stop the HTTP server first: a request served meanwhile may
// start another background read.
func (s *Server) Stop(ctx context.Context) error {
	s.runMu.Lock()
	cancel, done := s.cancel, s.done
	s.runMu.Unlock()
	bg := make(chan struct{})
	go func() {
		s.bg.Wait()
		close(bg)
	}()
	if cancel != nil {
		cancel()
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	select {
	case <-bg:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Handler serves the console.
func (s *Server) Handler() http.Handler { return s.mux }

func (s *Server) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(assets, "static")
	m.Handle("GET /static/", http.StripPrefix("/static/", cacheStatic(http.FileServerFS(static))))
	m.HandleFunc("GET /{$}", s.page(s.handleOverview))
	m.HandleFunc("GET /api/overview", s.page(s.handleOverviewJSON))
	m.HandleFunc("GET /tasks", s.page(s.handleSearch))
	m.HandleFunc("GET /task/{id...}", s.page(s.handleTask))
	m.HandleFunc("GET /dlq", s.page(s.handleDLQ))
	m.HandleFunc("GET /rejected", s.page(s.handleRejected))
	m.HandleFunc("GET /schedules", s.page(s.handleSchedules))
	m.HandleFunc("GET /schedules/new", s.page(s.handleScheduleForm))
	m.HandleFunc("GET /schedules/edit", s.page(s.handleScheduleForm))
	m.HandleFunc("GET /workers", s.page(s.handleWorkers))
	m.HandleFunc("GET /login", s.public(s.handleLoginForm))
	m.HandleFunc("POST /login", s.public(s.handleLogin))
	m.HandleFunc("POST /logout", s.public(s.handleLogout))
	m.HandleFunc("POST /actions/{action}", s.page(s.handleAction))
	m.HandleFunc("/", s.public(func(w http.ResponseWriter, r *http.Request, v *visit) {
		s.fail(w, r, v, http.StatusNotFound, "Page not found", "There is no page at "+r.URL.Path+".")
	}))
	s.mux = m
}

func cacheStatic(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		h.ServeHTTP(w, r)
	})
}

func (s *Server) now() time.Time { return s.cfg.Now() }
