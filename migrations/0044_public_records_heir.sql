-- A container's heir of public records (`stratus container set --public-records-heir`): the user
-- to whom a deleted user's public-database records are handed instead of being deleted with them
-- (`UserDeletion.publicRecordsFate`); NULL: they are deleted. The records' contents are the app's
-- data; what names the deleted user (the records' creator and modifier, their index rows and
-- events) names the heir afterwards.
ALTER TABLE containers ADD COLUMN public_records_heir text;

-- How many public records a deletion handed to the heir.
ALTER TABLE user_deletions ADD COLUMN records_handed_over bigint NOT NULL DEFAULT 0;
