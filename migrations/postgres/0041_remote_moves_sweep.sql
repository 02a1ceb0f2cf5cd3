-- A remote account's honoured Move is kept only while it holds another
-- back (store.MoveCooldown): the inbox's sweep deletes older ones by
-- moved_at (store.SweepRemoteMoves).
CREATE INDEX remote_moves_moved ON remote_moves (moved_at);
