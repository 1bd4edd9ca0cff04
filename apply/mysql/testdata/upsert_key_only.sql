INSERT INTO `tags` (`order_id`, `line`) VALUES
(1, 1),
(1, 2)
ON DUPLICATE KEY UPDATE `line` = `line`
