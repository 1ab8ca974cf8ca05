-- A participant's shared database reads their participations that were accepted or since removed
-- (a removal is answered as the zone leaving their database; migration 0032's snapshot tokens):
-- the index of 0020 holds only the accepted ones, so that read scanned every participation.
CREATE INDEX share_participants_user_taking_part ON share_participants (container, environment, user_record_name)
    WHERE acceptance_status IN ('ACCEPTED', 'REMOVED');
