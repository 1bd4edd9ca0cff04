DELETE FROM `order_lines`
WHERE (`order_id`, `line`) IN ((1, 1), (2, 7))
