package main

import (
	"net/http"

	"github.com/gorilla/mux"

	application "github.com/courier-ap/courier/app"
)

// buildRecorder builds the recorder of the application's inbox views,
// which the importer calls in every import's transaction (what local
// actors send one another is imported too); the application's hooks
// (webhooks) register on it. It registers itself on the store, which runs
// it in every local write's transaction to fill the outbox views.
func (a *app) buildRecorder() error {
	rec, err := application.NewRecorder(application.RecorderConfig{DB: a.db, Store: a.store})
	if err != nil {
		return err
	}
	a.recorder = rec
	return nil
}

// registerApplication mounts the application's routes (an actor's inbox
// collection and its event stream, and its outbox's event stream) on r.
func (a *app) registerApplication(r *mux.Router) error {
	h, err := application.New(application.Config{
		DB:        a.db,
		Store:     a.store,
		Failures:  a.failures,
		KeepAlive: a.cfg.StreamKeepAlive,
		Logger:    a.logger,
		Metrics:   a.metrics.App(),

		MaxStreams:         a.cfg.StreamsMax,
		MaxStreamsPerActor: a.cfg.StreamsPerActor,
	})
	if err != nil {
		return err
	}
	h.Register(r)
	a.application = h
	return nil
}

// endStreams ends the open event streams when hs shuts down: Shutdown
// waits for idle connections, which a stream never is.
func (a *app) endStreams(hs *http.Server) {
	if a.application != nil {
		hs.RegisterOnShutdown(a.application.Close)
	}
}
