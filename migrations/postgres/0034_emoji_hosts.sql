-- A custom emoji is its own host's (package store, AddEmojiReactionTx).
--
-- emoji_host: the host of the actor that reacted with a custom emoji
-- (:shortcode:), '' for a Unicode emoji. Reactions are counted per
-- (emoji, emoji_host), and a custom emoji's image is one that a reactor of
-- its own host gave, so that no other server chooses the image everyone
-- sees for it. The images recorded before are not known to be their
-- reactor's host's: they are dropped (their reactions stay, shown by
-- shortcode), and their rows keep emoji_host ''.
ALTER TABLE emoji_reactions ADD COLUMN emoji_host TEXT NOT NULL DEFAULT '';
UPDATE emoji_reactions SET emoji_icon = '';
